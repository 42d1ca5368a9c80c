//! The hand-over of takes and dropped marks from a lane to its writer, without a wake-up per
//! event.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::time::Instant;

use jobrelay_contract::event::JobEvent;

/// What the lane hands the writer without waking it: events taken, and marks of events let
/// go without a call. Kept in the order handed over, which is the order of the lane's queue
/// operations (both are handed over while the lane holds its queues).
pub(super) enum Handed {
    /// An event the lane took: into the inbox, marked for the lane's plugin, until a cursor
    /// settles it; with the bytes it charges to the budget until stored, and when it came.
    Take(Arc<JobEvent>, u64, Instant),
    /// An event the lane let go of without a call (a newer version replaced it): its mark.
    Drop(String),
}

/// The hand-over of takes and dropped marks from the lane to its writer.
///
/// A take is handed over for every queued event, and nobody waits for it: sent through the
/// writer's channel, each one woke the writer task — one wake-up per event besides the one
/// its acknowledgement costs, which at a few thousand events a second was most of what the
/// inbox cost. Here the lane appends to a list the writer empties at each of its rounds, and
/// the writer keeps a tick of [`TICK`] while takes keep coming, so a take is looked at in
/// time to be written when due. Only a take that finds the writer asleep (no take for
/// [`AWAKE_FOR`]) wakes it.
///
/// Order: the writer empties the list after receiving its requests, so a save it received
/// finds its take already there — the take was handed over before the event could be
/// called, the save after the call.
#[derive(Default)]
pub(super) struct Handoff {
    handed: parking_lot::Mutex<Vec<Handed>>,
    /// Set by the writer before it waits without a timer; the next take wakes it.
    pub(super) asleep: std::sync::atomic::AtomicBool,
}

impl Handoff {
    pub(super) fn list(&self) -> parking_lot::MutexGuard<'_, Vec<Handed>> {
        self.handed.lock()
    }

    /// Appends `handed`; `true` when the writer is asleep and must be woken.
    pub(super) fn hand(&self, handed: Handed) -> bool {
        self.list().push(handed);
        self.asleep.swap(false, Ordering::SeqCst)
    }

    /// Swaps the list for `spare` (empty), giving what was handed over, in order.
    pub(super) fn take_all(&self, spare: &mut Vec<Handed>) {
        std::mem::swap(&mut *self.list(), spare);
    }

    /// Marks the writer asleep unless something waits in the list: `false` when it must not
    /// sleep. Set before the list is looked at, so a take handed over meanwhile either is seen
    /// here or sees the mark and wakes the writer.
    pub(super) fn sleep(&self) -> bool {
        self.asleep.store(true, Ordering::SeqCst);
        if self.list().is_empty() {
            return true;
        }
        self.asleep.store(false, Ordering::SeqCst);
        false
    }
}
