//! A lane's worker: drains one job's queue, calling the plugin for each event with retries,
//! backoff and the plugin's rate limits (`crate::rate_limit`) until the call succeeds or gives up; then hands the
//! outcome to settling (`lane/settle.rs`), which records it, before taking the job's next event. The
//! worker writes nothing to the store itself.
//!
//! A worker starts with its job's key, not an event, and takes each event from the queue
//! ([`Queues::next`](crate::queue::Queues::next)) when it is ready for it: versions of the job
//! arrive while it is busy, the mode may replace a waiting one (`latest`), and a lane closing
//! or letting go of the cluster must leave the event queued. The queue is the hand-off; the
//! event taken is the worker's own until it is settled or given back. An event queued as its
//! place alone (the memory budget had no room) is read back from the store's inbox first.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use jobrelay_contract::event::{JobEvent, JobKey, Phase};
use jobrelay_runtime::CallError;
use jobrelay_state::Stored;

use super::Inner;
use super::counters::add;
use super::settle::{Outcome, settle};
use crate::event_counts::Count;
use crate::handler::Handler;
use crate::queue::Next;
use crate::trace::TraceOutcome;

/// One of the lane's workers: drains the job it was started for, then each job that waits
/// for a worker (see [`Queues::next_job`](crate::queue::Queues::next_job)), until none does.
pub(super) async fn work(inner: Arc<Inner>, mut key: JobKey) {
    loop {
        drain(&inner, &key).await;
        let closed = inner.stops.closed();
        let next = inner.queues.lock().next_job(closed);
        match next {
            Some(next) => key = next,
            None => return,
        }
    }
}

/// Drains one job's queue, one event at a time, until it is idle, forgotten, or its work is
/// cut short (the lane closed or let go of its cluster).
async fn drain(inner: &Arc<Inner>, key: &JobKey) {
    let queues = || inner.queues.lock();
    loop {
        let closed = inner.stops.closed();
        let next = queues().next(key, closed);
        let (event, replay) = match next {
            Next::Call { event, replay } => (event, replay),
            Next::Fetch { id } => match read_back(inner, key, &id).await {
                ReadBack::Event(mut event) => {
                    add(&inner.counters.read_back, 1);
                    if !queues().fetched(key, &mut event) {
                        return;
                    }
                    (Arc::new(*event), false)
                }
                ReadBack::Refused(reason) => {
                    // Named, and left in the store for the operator; the job goes on.
                    tracing::error!(plugin = %inner.name, event = %id, reason = %reason,
                        "an inbox entry cannot be read; it is left in the store and not delivered");
                    queues().pop_head(key, true, Phase::Unknown);
                    inner.settled.notify_waiters();
                    continue;
                }
                ReadBack::Stopped => {
                    queues().release(key, None);
                    inner.settled.notify_waiters();
                    return;
                }
            },
            Next::Forgotten => return,
            Next::LetGo(cursor) => {
                inner.writer.forget(*cursor);
                if let Some(book) = &inner.book {
                    book.lane_done(&inner.name, key);
                }
                inner.settled.notify_waiters();
                return;
            }
            Next::Idle => {
                if let Some(book) = &inner.book {
                    book.lane_done(&inner.name, key);
                }
                inner.settled.notify_waiters();
                return;
            }
        };
        let Some(outcome) = call(inner, &event).await else {
            // The lane closed, or let go of the job's cluster, while retrying: the event stays
            // unacknowledged for the next start or the next owner.
            queues().release(key, Some(event));
            inner.settled.notify_waiters();
            return;
        };
        if !settle(inner, key, event, replay, outcome).await {
            return;
        }
    }
}

/// What reading a queued event back from the inbox gave.
enum ReadBack {
    Event(Box<JobEvent>),
    /// The entry is damaged, or missing though every take was stored: why.
    Refused(String),
    /// The lane closed, or let go of the job's cluster, first.
    Stopped,
}

/// Reads back the event `id`, which the job's queue holds as its place alone. It may not be
/// stored yet — the lane's writer may not have reached it, or its batch failed and waits to
/// be written again — so the writer is flushed first when it is not found; a store that does
/// not answer is asked again, with backoff, until it does or the lane stops.
async fn read_back(inner: &Inner, key: &JobKey, id: &str) -> ReadBack {
    use backon::BackoffBuilder;
    let mut delays = backon::ExponentialBuilder::default()
        .with_min_delay(std::time::Duration::from_millis(50))
        .with_max_delay(std::time::Duration::from_secs(5))
        .without_max_times()
        .build();
    let mut all_stored = false;
    loop {
        if inner.stops.stops(&key.cluster) {
            return ReadBack::Stopped;
        }
        match inner.read_backs.read(id).await {
            Ok(Stored::Event(event)) => return ReadBack::Event(event),
            Ok(Stored::Damaged(reason)) => return ReadBack::Refused(reason),
            Ok(Stored::Missing) if all_stored => {
                return ReadBack::Refused("its event is missing from the inbox".into());
            }
            Ok(Stored::Missing) => {
                all_stored = inner.writer.flush().await;
                if all_stored {
                    continue;
                }
            }
            Err(e) => {
                tracing::warn!(plugin = %inner.name, event = %id, error = %e,
                    "cannot read a queued event back from the inbox; trying again");
            }
        }
        let delay = delays.next().unwrap_or(std::time::Duration::from_secs(5));
        if !inner.stops.wait(&key.cluster, delay).await {
            return ReadBack::Stopped;
        }
    }
}

/// How many times one event may be deferred before it is dead-lettered: a plugin that defers
/// for ever would hold its job's queue for ever.
const MAX_DEFERRALS: u32 = 1000;

/// Call the plugin until it succeeds, gives up or runs out of attempts. `None`: the lane
/// closed (or let go of the event's cluster) before the call ended.
async fn call(inner: &Arc<Inner>, event: &JobEvent) -> Option<Outcome> {
    let settings = inner.settings.load_full();
    let mut delays = settings.retry.delays();
    let mut attempts = 0u32;
    let mut deferrals = 0u32;
    if !inner.stops.until_serving(&event.cluster).await {
        return None;
    }
    loop {
        // The permit first, then the rate limits: a call is counted by the limits at the
        // moment it is made, so nothing may be waited for between the two (a call counted
        // while it still waited for a permit would be counted earlier than it was made, and
        // one that then stopped would be counted and not made).
        let permits = inner.permits.load_full();
        let permit = permits.acquire().await.ok()?;
        let slot = inner
            .stops
            .rate_limited(&inner.limits, &event.cluster)
            .await?;
        let plugin = Arc::clone(&**inner.plugin.load());
        add(&inner.counters.in_flight, 1);
        let started = Instant::now();
        let result = plugin.handle(event).await;
        // The call's end, as the limits count it: its requests were made by now.
        drop(slot);
        inner.counters.calls.record(started.elapsed(), &result);
        inner.counters.in_flight.fetch_sub(1, Ordering::SeqCst);
        drop(permit);
        let error = match result {
            Ok(()) => {
                tracing::debug!(plugin = %inner.name, version = %plugin.version(),
                    event = %event.id, phase = %event.phase, attempts = attempts + 1,
                    elapsed_ms = started.elapsed().as_millis() as u64, "delivered");
                inner
                    .trace
                    .record(event, TraceOutcome::Delivered, attempts + 1, None);
                return Some(Outcome::Delivered);
            }
            Err(CallError::Deferred { after, reason }) => {
                // Held back on purpose: no attempt spent, no failure counted.
                deferrals += 1;
                if deferrals > MAX_DEFERRALS {
                    let error = CallError::GiveUp(format!(
                        "deferred {MAX_DEFERRALS} times; the last time: {reason}"
                    ));
                    return Some(Outcome::GaveUp { error, attempts });
                }
                add(&inner.counters.deferred, 1);
                tracing::debug!(plugin = %inner.name, version = %plugin.version(),
                    event = %event.id, defer_s = after.as_secs(), reason = %reason, "deferred");
                // Waiting on purpose: not the lane's lag until the next attempt.
                let key = event.job_key();
                inner.queues.lock().set_deferred(&key, true);
                let waited = inner.stops.wait(&event.cluster, after).await;
                inner.queues.lock().set_deferred(&key, false);
                if !waited {
                    return None;
                }
                continue;
            }
            Err(e) => e,
        };
        add(&inner.counters.failed_calls, 1);
        if error.is_retryable()
            && !jobrelay_contract::fleet::is_fleet(event)
            && inner.stops.offline(&event.cluster)
        {
            // The job's cluster is offline: waited out, no attempt spent, so an outage
            // longer than the retries dead-letters nothing. Tried again at the policy's
            // longest wait (the attempts' own schedule is bounded by their number). A fleet
            // event (the outage's own news) reads nothing of the cluster: its attempts count.
            let delay = std::time::Duration::from_millis(settings.retry.max_delay_ms.max(1));
            tracing::debug!(plugin = %inner.name, event = %event.id, error = %error,
                retry_in_ms = delay.as_millis() as u64,
                "plugin call failed while its cluster is offline; waiting, no attempt spent");
            if !inner.stops.wait(&event.cluster, delay).await {
                return None;
            }
            continue;
        }
        attempts += 1;
        let delay = if error.is_retryable() {
            delays.next()
        } else {
            None
        };
        let Some(delay) = delay else {
            return Some(Outcome::GaveUp { error, attempts });
        };
        add(&inner.counters.retried, 1);
        inner.counters.by_job_kind.add(event, Count::Retried);
        inner.trace.record(
            event,
            TraceOutcome::Retrying,
            attempts,
            Some(&error.to_string()),
        );
        tracing::warn!(plugin = %inner.name, version = %plugin.version(), event = %event.id,
            attempt = attempts, retry_in_ms = delay.as_millis() as u64, error = %error,
            "plugin call failed; retrying");
        if !inner.stops.wait(&event.cluster, delay).await {
            return None;
        }
    }
}

/// Stands in for the plugin in a lane that has no version yet; never called, since workers
/// wait for a version before calling (see `Stops::until_serving`).
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
