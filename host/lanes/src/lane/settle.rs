//! Settling a call's outcome: the one place that records what became of the event at the head
//! of a job's queue before the job's next event starts — the dead letter if the call gave up,
//! then the cursor with the event's inbox mark removed in the same transaction (durable
//! first, so nothing acknowledged is lost to a crash and nothing settled comes back), the
//! counters, and the head popped from the queue.

use std::sync::Arc;

use jobrelay_contract::event::{JobEvent, JobKey};
use jobrelay_runtime::CallError;
use jobrelay_state::Cursor;

use super::Inner;
use super::counters::add;
use super::dead_letters::{dead_letter_stored_later, record_dead_letter};
use crate::event_counts::Count;

/// How a call for a queued event ended.
pub(super) enum Outcome {
    /// The plugin handled the event.
    Delivered,
    /// The plugin failed for good, or ran out of attempts: the event goes to the dead-letter
    /// list with the last error.
    GaveUp { error: CallError, attempts: u32 },
}

/// Settles the event at the head of the job's queue: the dead letter if the call gave up, the
/// cursor (unless it is a replay), then the head popped. The event is used up: its fields
/// move into the cursor. `false`: the dead letter could not be stored before the lane
/// closed or let go of the job's cluster; the event was given back, unacknowledged (it is in
/// the inbox), and the worker must let the job go.
pub(super) async fn settle(
    inner: &Inner,
    key: &JobKey,
    event: Arc<JobEvent>,
    replay: bool,
    outcome: Outcome,
) -> bool {
    let delivered = match &outcome {
        Outcome::Delivered => {
            add(&inner.counters.delivered, 1);
            inner.counters.by_job_kind.add(&event, Count::Delivered);
            true
        }
        Outcome::GaveUp { error, attempts } => {
            // The cursor must not move past an event that is neither delivered nor stored
            // as a dead letter: the store is asked again until it takes the letter.
            if !record_dead_letter(inner, &event, error, *attempts).await
                && !dead_letter_stored_later(inner, &event, error, *attempts).await
            {
                inner.queues.lock().release(key, Some(event));
                inner.settled.notify_waiters();
                return false;
            }
            false
        }
    };
    let phase = event.phase;
    if !replay {
        // The event's inbox mark goes with its cursor, in one transaction.
        // The fields move into the cursor unless the lane's writer still shares the event
        // (its take waits for this very cursor); then they are copied.
        let (cursor, id) = match Arc::try_unwrap(event) {
            Ok(event) => Cursor::taking(&inner.name, event),
            Err(shared) => (Cursor::from_event(&inner.name, &shared), shared.id.clone()),
        };
        let settles = Some(id.clone());
        let saved = if cursor.deleted {
            inner.writer.remove(cursor, settles).await
        } else {
            inner.writer.save(cursor, settles).await
        };
        if let Err(e) = saved {
            tracing::error!(plugin = %inner.name, event = %id, error = %e,
                "cannot store the cursor; the event may be delivered again after a restart");
        }
    }
    let queued_at = inner.queues.lock().pop_head(key, replay, phase);
    // Observed to acknowledged: from the moment the lane received the version (the watch
    // hands it over at once) to its cursor stored. Replays of dead letters are not counted:
    // their wait is the operator's, not the pipeline's.
    if let (true, false, Some(at)) = (delivered, replay, queued_at) {
        inner.counters.delivery.record(at.elapsed());
    }
    inner.settled.notify_waiters();
    true
}
