//! Resuming a lane's inbox: the events taken and not delivered — by an earlier process, or by
//! the replica that delivered before a take-over — offered again, a page at a time, oldest
//! first, and judged by the mode against what the cursors say was delivered.

use std::collections::HashSet;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::{Lane, Provenance};
use jobrelay_contract::event::JobKey;
use jobrelay_state::{DeliveryStore, Inbox, StoreError};

impl Lane {
    /// Forgets what the lane knows of every job that has no work in it, reads the plugin's
    /// cursors again (of one cluster, or of all) and resumes the events still in its inbox.
    /// For a replica that takes over delivery — while it did not deliver, another replica
    /// moved the shared cursors on and left its undelivered events in the inbox — and for a
    /// daemon that delivers from the start, once its lane is open.
    /// Taking a cluster back also accepts its versions again (see
    /// [`forget_cluster`](Lane::forget_cluster)).
    pub async fn reload(&self, cluster: Option<&str>) -> Result<(), StoreError> {
        let of = |c: &str| cluster.is_none_or(|only| only == c);
        if let Some(cluster) = cluster {
            self.inner.stops.include(cluster);
        }
        let cursors = self.inner.store.cursors(&self.inner.name).await?;
        // Jobs this lane has work of its own for keep it: their versions are queued already.
        let busy = {
            let mut queues = self.inner.queues.lock();
            queues.reload(of, &cursors);
            queues.jobs_with_work(of)
        };
        drop(cursors);
        self.resume_inbox_of(of, &busy).await
    }

    /// Resumes the events still in the plugin's inbox, on the cursors the lane opened with:
    /// for a daemon that delivers from the start, once its lane is open (see
    /// [`reload`](Lane::reload), which reads the cursors again first).
    pub async fn resume_inbox(&self) -> Result<(), StoreError> {
        self.resume_inbox_of(|_| true, &HashSet::new()).await
    }

    /// Offers the inbox's events of the clusters `of` selects, but for the jobs in `busy`.
    async fn resume_inbox_of(
        &self,
        of: impl Fn(&str) -> bool,
        busy: &HashSet<JobKey>,
    ) -> Result<(), StoreError> {
        // What the memory budget has no room for waits where it is; none is taken again.
        let (mut after, mut resumed) = (0, 0u64);
        loop {
            let page = read_inbox_page(&self.inner.name, self.inner.store.as_ref(), after).await?;
            // Each event's wait counts from when it was taken, by whichever process: a lane
            // stuck across restarts shows its age, not the time since the last start.
            let (now, unix_now) = (Instant::now(), unix_seconds());
            let taken = page.taken_at.iter().map(|at| {
                let waited = u64::try_from(unix_now.saturating_sub(*at)).unwrap_or(0);
                now.checked_sub(Duration::from_secs(waited)).unwrap_or(now)
            });
            for (event, since) in page.events.into_iter().zip(taken) {
                if !of(&event.cluster)
                    || self.inner.stops.excludes(&event.cluster)
                    || (!busy.is_empty() && busy.contains(&event.job_key()))
                {
                    continue;
                }
                resumed += 1;
                self.offer(event, Provenance::Resumed { since }, |_, _| Vec::new());
            }
            match page.next {
                Some(next) => after = next,
                None => break,
            }
        }
        if resumed > 0 {
            tracing::info!(plugin = %self.inner.name, events = resumed,
                "resuming the events taken and not delivered before");
        }
        Ok(())
    }
}

/// A page of `plugin`'s events in the store's inbox, oldest first, from just after `after`. A
/// mark whose event cannot be read is named in the log and left where it is (an operator may
/// repair or delete it); the rest flow.
async fn read_inbox_page(
    plugin: &str,
    store: &dyn DeliveryStore,
    after: i64,
) -> Result<Inbox, StoreError> {
    let page = store
        .inbox_page(plugin, after, jobrelay_state::INBOX_PAGE)
        .await?;
    for damaged in &page.damaged {
        tracing::error!(plugin, event = %damaged.event_id, reason = %damaged.reason,
            "an inbox entry cannot be read; it is left in the store and not delivered");
    }
    Ok(page)
}

/// Seconds since the epoch now, as the store stamps an event it takes.
fn unix_seconds() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}
