//! The lane's two ways to the dead-letter list: a call that gave up (recorded by settling, and
//! stored again with backoff until the store takes it, since the cursor must not move past an
//! event neither delivered nor dead-lettered), and a version over a bound (`max_queued_per_job`,
//! `max_inbox_events`), which never reaches a call and is written by one task at a time in
//! arrival order.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use super::Inner;
use super::counters::add;
use crate::event_counts::Count;
use crate::queue::Bound;
use crate::trace::TraceOutcome;
use jobrelay_contract::event::{JobEvent, JobKey};
use jobrelay_runtime::CallError;

/// Records a dead letter: counted, logged, stored (replayable), and the finalizer hold on its
/// job told. Whether it was stored.
pub(super) async fn record_dead_letter(
    inner: &Inner,
    event: &JobEvent,
    error: &CallError,
    attempts: u32,
) -> bool {
    add(&inner.counters.dead_lettered, 1);
    inner.counters.by_job_kind.add(event, Count::DeadLettered);
    inner.trace.record(
        event,
        TraceOutcome::DeadLettered,
        attempts,
        Some(&error.to_string()),
    );
    if let Some(book) = &inner.book {
        book.lane_dead_lettered(&inner.name, &event.job_key());
    }
    tracing::error!(plugin = %inner.name, event = %event.id, attempts, error = %error,
        "event moved to the dead-letter list");
    match inner
        .store
        .add_dead_letter(&inner.name, event, &error.to_string(), attempts)
        .await
    {
        Ok(_) => true,
        Err(e) => {
            tracing::error!(plugin = %inner.name, event = %event.id, error = %e,
                "cannot record the dead letter");
            false
        }
    }
}

/// Stores the dead letter whose first write failed, trying again with backoff (0.5 s doubling
/// to 30 s) until the store takes it; `false` if the lane closes, or lets go of the event's
/// cluster, first.
pub(super) async fn dead_letter_stored_later(
    inner: &Inner,
    event: &JobEvent,
    error: &CallError,
    attempts: u32,
) -> bool {
    use backon::BackoffBuilder;
    let mut delays = backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(500))
        .with_max_delay(Duration::from_secs(30))
        .with_jitter()
        .without_max_times()
        .build();
    loop {
        let delay = delays.next().unwrap_or(Duration::from_secs(30));
        if !inner.stops.wait(&event.cluster, delay).await {
            return false;
        }
        match inner
            .store
            .add_dead_letter(&inner.name, event, &error.to_string(), attempts)
            .await
        {
            Ok(_) => {
                tracing::info!(plugin = %inner.name, event = %event.id,
                    "the dead letter is stored now");
                return true;
            }
            Err(e) => tracing::warn!(plugin = %inner.name, event = %event.id, error = %e,
                "still cannot record the dead letter; trying again"),
        }
    }
}

/// Versions over a bound, waiting to be written as dead letters, in arrival order; `true`
/// while a task is writing them (one at a time, so their order is kept).
#[derive(Default)]
pub(super) struct Overflow(Mutex<(VecDeque<(JobEvent, Bound)>, bool)>);

impl Overflow {
    /// Whether a version of the job waits here.
    pub(super) fn holds(&self, key: &JobKey) -> bool {
        self.0.lock().0.iter().any(|(e, _)| e.job_key() == *key)
    }
}

/// Moves a version that would exceed a bound to the dead-letter list: the plugin is down or
/// far behind, and holding every version in memory would grow without limit. The version
/// stays durable and replayable (`jobrelay dead-letters replay`), and a deletion held by the
/// finalizer is released as for any dead letter.
pub(super) fn overflow_to_dead_letters(inner: &Arc<Inner>, event: JobEvent, bound: Bound) {
    let mut overflow = inner.overflow.0.lock();
    overflow.0.push_back((event, bound));
    if overflow.1 {
        return; // the running writer takes it
    }
    overflow.1 = true;
    let inner = inner.clone();
    tokio::spawn(async move {
        loop {
            let next = {
                let mut overflow = inner.overflow.0.lock();
                let next = overflow.0.pop_front();
                if next.is_none() {
                    overflow.1 = false;
                }
                next
            };
            let Some((event, bound)) = next else { break };
            let error = CallError::Host(match bound {
                Bound::Job(cap) => format!(
                    "lane overflow: {cap} versions of this job were already waiting (the \
                     plugin is down or too slow; max_queued_per_job)"
                ),
                Bound::Inbox(bound) => format!(
                    "inbox full: {bound} events of this plugin were already waiting (the \
                     plugin is down or too slow; max_inbox_events)"
                ),
            });
            // A resumed event's mark goes once its dead letter holds it (an observed one
            // over the bound was never taken: removing no mark costs nothing).
            if record_dead_letter(&inner, &event, &error, 0).await {
                inner.writer.drop_mark(event.id);
            } else {
                tracing::warn!(plugin = %inner.name, event = %event.id,
                    "the version stays in the inbox (if it was taken) and is offered again \
                     at the next start");
            }
        }
    });
}
