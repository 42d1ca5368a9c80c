//! The counts of what a lane's queued items hold, charged to the process-wide budget.

use std::sync::Arc;

use super::InboxChanges;
use super::item::{Item, Kept, id_is_derived};
use crate::budget::{MemoryBudget, charge_of};
use jobrelay_contract::event::JobEvent;

/// What the queued items hold, counted as items come and go: the events pending, the bytes
/// they charge to the process-wide budget, and how many wait only in the inbox. Given back to
/// the budget when the lane's queues are dropped.
#[derive(Debug, Default)]
pub(super) struct Ledger {
    pub(super) budget: Arc<MemoryBudget>,
    /// Events in all queues, the ones in flight included.
    pub(super) pending: u64,
    /// Of those, replays of dead letters (not in the inbox).
    pub(super) replays: u64,
    /// Bytes charged by the events kept whole (or out for their call).
    pub(super) held: u64,
    /// Events waiting only in the inbox.
    pub(super) spilled: u64,
}

impl Ledger {
    /// Where a newly queued event is kept: whole while the budget has room, else only in the
    /// inbox. With `taking`, the event (shared with the queue when it is also kept) goes to
    /// `inbox` with its charge, to be taken into the inbox.
    pub(super) fn keep(
        &mut self,
        event: JobEvent,
        taking: bool,
        inbox: &mut impl InboxChanges,
    ) -> Kept {
        self.pending += 1;
        let charge = charge_of(&event);
        let room = self.budget.try_hold(charge);
        if !room && id_is_derived(&event) {
            self.spill(1);
            if taking {
                inbox.take(Arc::new(event), charge);
            }
            return Kept::Spilled;
        }
        if !room {
            // Its id could not be made again to read it back: kept whatever the budget.
            self.budget.keep(charge);
        }
        self.held += charge;
        let event = Arc::new(event);
        if taking {
            inbox.take(event.clone(), charge);
        }
        Kept::Here { event, charge }
    }

    /// A replay of a dead letter is not in the inbox: it is kept whole, and not charged (see
    /// [`budget`](crate::budget)).
    pub(super) fn keep_replay(&mut self, event: JobEvent) -> Kept {
        self.pending += 1;
        self.replays += 1;
        Kept::Here {
            event: Arc::new(event),
            charge: 0,
        }
    }

    pub(super) fn spill(&mut self, n: u64) {
        self.spilled += n;
        self.budget.count_spilled(true, n);
    }

    pub(super) fn unspill(&mut self) {
        self.spilled = self.spilled.saturating_sub(1);
        self.budget.count_spilled(false, 1);
    }

    pub(super) fn release(&mut self, charge: u64) {
        self.held = self.held.saturating_sub(charge);
        self.budget.release_kept(charge);
    }

    /// An item leaves its queue.
    pub(super) fn gone(&mut self, item: &Item) {
        self.pending = self.pending.saturating_sub(1);
        if item.replay {
            self.replays = self.replays.saturating_sub(1);
        }
        match &item.held {
            Kept::Here { charge, .. } | Kept::Out { charge, .. } => self.release(*charge),
            Kept::Spilled => self.unspill(),
        }
    }
}

impl Drop for Ledger {
    fn drop(&mut self) {
        self.budget.release_kept(self.held);
        self.budget.count_spilled(false, self.spilled);
    }
}
