//! What the lane does with its plugin's filter (`crate::filter`): the verdict the
//! dispatcher asks for before it copies an event, letting go of a job that stops matching,
//! and telling a finalizer hold that a skipped deletion leaves nothing of the job here.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Lane;
use super::counters::add;
use crate::filter::{Filter, Verdict};
use jobrelay_contract::event::{JobEvent, JobKey};
use jobrelay_state::Cursor;
use jobrelay_watch::tracker::Observed;

/// At most one warning this often about a filter expression that fails on events.
const WARN_EVERY: Duration = Duration::from_secs(60);

impl Lane {
    /// The filter's verdict on `observed`, counted when it is not taken: a job that is not the
    /// plugin's is let go, an expression that fails is counted apart and warned of.
    pub fn judge(&self, observed: &Observed) -> Verdict {
        let settings = self.inner.settings.load();
        let filter = &settings.filter;
        if filter.takes_all() {
            return Verdict::Take;
        }
        let verdict = filter.verdict(&observed.event, &observed.kind.name);
        match &verdict {
            Verdict::Take => {}
            Verdict::NotJob => {
                add(&self.inner.counters.filtered, 1);
                self.let_go(&observed.event);
            }
            Verdict::NotEvent => {
                add(&self.inner.counters.filtered, 1);
            }
            Verdict::Failed(why) => {
                add(&self.inner.counters.filtered, 1);
                add(&self.inner.counters.filter_errors, 1);
                self.warn_failed(&observed.event, why);
            }
        }
        verdict
    }

    /// The filter the lane judges by now.
    pub fn filter(&self) -> Arc<Filter> {
        Arc::clone(&self.inner.settings.load().filter)
    }

    /// Whether a deletion the lane made up for a job it knew (gone while jobrelay was away)
    /// is for the plugin: the job's cluster and namespace, the phase and the expression, as
    /// for an observed version. Its labels are not known (the object is gone): a job the lane
    /// knew was taken by them when last seen. Counted when not.
    pub(super) fn takes_gone(&self, event: &JobEvent, kind: &str) -> bool {
        let settings = self.inner.settings.load();
        let filter = &settings.filter;
        if filter.takes_all() {
            return true;
        }
        let taken = filter.takes_place(event) && filter.takes_event(event, kind) == Verdict::Take;
        if !taken {
            add(&self.inner.counters.filtered, 1);
        }
        taken
    }

    /// A version of a job the filter takes that it skipped, on a job being deleted: if nothing
    /// of the job waits here, the finalizer hold need not wait for this lane.
    pub fn pass(&self, key: &JobKey) {
        let idle = {
            let queues = self.inner.queues.lock();
            queues.idle(key)
        };
        if idle && let Some(book) = &self.inner.book {
            book.lane_done(&self.inner.name, key);
        }
    }

    /// Whether an event of the job is still queued or in flight here, or on its way to the
    /// dead-letter list: what clean-up waits for before it deletes a finished job. (A job
    /// whose events were all delivered, skipped or dead-lettered owes nothing here; its dead
    /// letters are looked up in the store.)
    pub fn owes(&self, key: &JobKey) -> bool {
        let queued = {
            let queues = self.inner.queues.lock();
            !queues.idle(key)
        };
        queued || self.inner.overflow.holds(key)
    }

    /// Lets go of the job of `event` when the lane knows it and nothing of it waits: it is
    /// forgotten and its cursor removed, so neither a restart nor a re-list brings it back.
    fn let_go(&self, event: &JobEvent) {
        let key = event.job_key();
        let gone = {
            let mut queues = self.inner.queues.lock();
            queues.let_go(&key)
        };
        if gone {
            tracing::debug!(plugin = %self.inner.name, job = %key,
                "the filter no longer takes the job; let go");
            self.inner
                .writer
                .forget(Cursor::from_event(&self.inner.name, event));
        }
    }

    fn warn_failed(&self, event: &JobEvent, why: &str) {
        let now = Instant::now();
        let mut last = self.inner.filter_warned.lock();
        if last.is_some_and(|at| now.duration_since(at) < WARN_EVERY) {
            tracing::debug!(plugin = %self.inner.name, event = %event.id, error = why,
                "the filter expression failed; the event is not delivered");
            return;
        }
        *last = Some(now);
        tracing::warn!(plugin = %self.inner.name, event = %event.id, error = why,
            "the filter expression failed; the event is not delivered (counted in \
             jobrelay_events_filter_errors_total; warned at most once a minute)");
    }
}
