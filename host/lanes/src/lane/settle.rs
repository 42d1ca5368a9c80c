//! Settling an event: what a lane records once a job's event is done with, before the job's
//! next event starts — the cursor (durable first, so nothing acknowledged is lost to a crash)
//! or the dead letter, the counters, and the queue's head popped.

use std::sync::atomic::Ordering;

use jobrelay_contract::event::{JobEvent, JobKey};
use jobrelay_runtime::CallError;
use jobrelay_state::Cursor;

use super::Inner;
use super::worker::Outcome;
use crate::event_counts::Count;

pub(super) async fn dead_letter(inner: &Inner, event: &JobEvent, error: &CallError, attempts: u32) {
    inner.dead_lettered.fetch_add(1, Ordering::SeqCst);
    inner.by_job_kind.add(event, Count::DeadLettered);
    if let Some(book) = &inner.book {
        book.lane_dead_lettered(&inner.name, &event.job_key());
    }
    tracing::error!(plugin = %inner.name, event = %event.id, attempts, error = %error,
        "event moved to the dead-letter list");
    if let Err(e) = inner
        .store
        .add_dead_letter(&inner.name, event, &error.to_string(), attempts)
        .await
    {
        tracing::error!(plugin = %inner.name, event = %event.id, error = %e,
            "cannot record the dead letter; the event will be delivered again after a restart");
    }
}

/// Settle the event at the head of the job's queue: record it, persist the cursor, pop it.
/// The event is used up: its fields move into the cursor.
pub(super) async fn acknowledge(
    inner: &Inner,
    key: &JobKey,
    event: JobEvent,
    replay: bool,
    outcome: Outcome,
) {
    if matches!(outcome, Outcome::Delivered) {
        inner.delivered.fetch_add(1, Ordering::SeqCst);
        inner.by_job_kind.add(&event, Count::Delivered);
    }
    let phase = event.phase;
    if !replay {
        let (cursor, id) = Cursor::taking(&inner.name, event);
        let saved = if cursor.deleted {
            inner.cursor_writer.remove(cursor).await
        } else {
            inner.cursor_writer.save(cursor).await
        };
        if let Err(e) = saved {
            tracing::error!(plugin = %inner.name, event = %id, error = %e,
                "cannot store the cursor; the event may be delivered again after a restart");
        }
    }
    let queued_at = inner
        .queues
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .settle(key, replay, phase);
    // Observed to acknowledged: from the moment the lane received the version (the watch
    // hands it over at once) to its cursor stored. Replays of dead letters are not counted:
    // their wait is the operator's, not the pipeline's.
    if let (Outcome::Delivered, false, Some(at)) = (outcome, replay, queued_at) {
        inner.delivery.record(at.elapsed());
    }
    inner.settled.notify_waiters();
}
