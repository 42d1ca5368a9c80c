//! A lane's worker: drains one job's queue, calling the plugin for each event with retries,
//! backoff and the plugin's rate limits until the call succeeds or gives up; then hands the
//! outcome to [`super::settle`], which records it, before taking the job's next event. The
//! worker writes nothing to the store itself.
//!
//! A worker starts with its job's key, not an event, and takes each event from the queue
//! ([`Queues::next`](crate::queue::Queues::next)) when it is ready for it: versions of the job
//! arrive while it is busy, the mode may replace a waiting one (`latest`), and a lane closing
//! or letting go of the cluster must leave the event queued. The queue is the hand-off; the
//! event taken is the worker's own until it is settled or given back.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use jobrelay_contract::event::{JobEvent, JobKey};
use jobrelay_runtime::CallError;

use super::Inner;
use super::settle::{Outcome, settle};
use crate::event_counts::Count;
use crate::handler::Handler;
use crate::queue::Next;

/// Drain one job's queue, one event at a time.
pub(super) async fn work(inner: Arc<Inner>, key: JobKey) {
    let queues = || inner.queues.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        let closed = inner.closed.load(Ordering::SeqCst);
        let next = queues().next(&key, closed);
        let (event, replay) = match next {
            Next::Call { event, replay } => (*event, replay),
            Next::Forgotten => return,
            Next::Idle => {
                if let Some(book) = &inner.book {
                    book.lane_done(&inner.name, &key);
                }
                inner.settled.notify_waiters();
                return;
            }
        };
        let Some(outcome) = call(&inner, &event).await else {
            // The lane closed, or let go of the job's cluster, while retrying: the event stays
            // unacknowledged for the next start or the next owner.
            queues().release(&key, event);
            inner.settled.notify_waiters();
            return;
        };
        settle(&inner, &key, event, replay, outcome).await;
    }
}

/// Waits until every rate limit of the lane lets one more call go: each call, retries
/// included, takes one token of each. A reload that changes the limits ends the wait at once
/// and starts it again under the new ones, so a limit removed or raised applies to the calls
/// already waiting, not only to the events queued after them.
async fn rate_limited(inner: &Inner) {
    loop {
        let changed = inner.limits_changed.notified();
        tokio::pin!(changed);
        // Registered before the limits are read: a change between the two is not missed.
        changed.as_mut().enable();
        let limiters = inner.limiters.load_full();
        let ready = async {
            for limiter in limiters.iter() {
                limiter.until_ready().await;
            }
        };
        tokio::select! {
            () = ready => return,
            () = &mut changed => {}
        }
    }
}

/// Call the plugin until it succeeds, gives up or runs out of attempts. `None`: the lane
/// closed (or let go of the event's cluster) before the call ended.
async fn call(inner: &Arc<Inner>, event: &JobEvent) -> Option<Outcome> {
    let settings = inner.settings.load_full();
    let mut delays = settings.retry.delays();
    let mut attempts = 0u32;
    if !until_serving(inner, &event.cluster).await {
        return None;
    }
    loop {
        rate_limited(inner).await;
        let permits = inner.permits.load_full();
        let permit = permits.acquire().await.ok()?;
        if inner.stops(&event.cluster) {
            return None;
        }
        let plugin = Arc::clone(&**inner.plugin.load());
        inner.in_flight.fetch_add(1, Ordering::SeqCst);
        let started = Instant::now();
        let result = plugin.handle(event).await;
        inner.calls.record(started.elapsed(), &result);
        inner.in_flight.fetch_sub(1, Ordering::SeqCst);
        drop(permit);
        attempts += 1;
        let error = match result {
            Ok(()) => {
                tracing::debug!(plugin = %inner.name, version = %plugin.version(),
                    event = %event.id, phase = %event.phase, attempts,
                    elapsed_ms = started.elapsed().as_millis() as u64, "delivered");
                return Some(Outcome::Delivered);
            }
            Err(e) => e,
        };
        inner.failed_calls.fetch_add(1, Ordering::SeqCst);
        let delay = if error.is_retryable() {
            delays.next()
        } else {
            None
        };
        let Some(delay) = delay else {
            return Some(Outcome::GaveUp { error, attempts });
        };
        inner.retried.fetch_add(1, Ordering::SeqCst);
        inner.by_job_kind.add(event, Count::Retried);
        tracing::warn!(plugin = %inner.name, version = %plugin.version(), event = %event.id,
            attempt = attempts, retry_in_ms = delay.as_millis() as u64, error = %error,
            "plugin call failed; retrying");
        // Register for the close signal before checking the flags, so a close that happens
        // in between still cuts the wait short. A signal for another cluster leaving only
        // wakes this wait to check again.
        let until = tokio::time::Instant::now() + delay;
        loop {
            let closing = inner.closing.notified();
            tokio::pin!(closing);
            closing.as_mut().enable();
            if inner.stops(&event.cluster) {
                return None;
            }
            tokio::select! {
                _ = tokio::time::sleep_until(until) => break,
                _ = closing => {}
            }
        }
    }
}

/// Waits until the lane has a plugin version. `false`: the lane closed or let go of the
/// event's cluster first, and the event stays unacknowledged.
async fn until_serving(inner: &Inner, cluster: &str) -> bool {
    loop {
        let installed = inner.version_installed.notified();
        let closing = inner.closing.notified();
        tokio::pin!(installed, closing);
        installed.as_mut().enable();
        closing.as_mut().enable();
        if inner.stops(cluster) {
            return false;
        }
        if inner.serving.load(Ordering::SeqCst) {
            return true;
        }
        tokio::select! {
            _ = installed => {}
            _ = closing => {}
        }
    }
}

/// Stands in for the plugin in a lane that has no version yet; never called, since workers
/// wait for a version before calling (see [`until_serving`]).
pub(super) struct NotLoaded(pub(super) String);

#[async_trait::async_trait]
impl Handler for NotLoaded {
    fn name(&self) -> &str {
        &self.0
    }

    fn version(&self) -> &str {
        "-"
    }

    async fn handle(&self, _event: &JobEvent) -> Result<(), CallError> {
        Err(CallError::Host(
            "the plugin has no version loaded yet".into(),
        ))
    }
}
