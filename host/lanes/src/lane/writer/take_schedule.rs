//! When each event a lane took is due to be written to the inbox, and which takes a round
//! writes.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use tokio::time::Instant;

use crate::budget::MemoryBudget;
use jobrelay_contract::event::JobEvent;
use jobrelay_state::{Settled, WriteBatch};

/// The events taken and not written yet, each with when it is due to be written. A take
/// settled before that (the lane kept up) is never written, nor is its mark: only a lagging
/// lane's events reach the inbox, and only they are encoded.
///
/// Kept in the order they are due, which is the order they came (each is due [`TAKE_DELAY`]
/// after it came; a failed batch's takes go back to the front with their own times): the takes
/// due are a prefix, so a round takes them from the front and leaves the rest untouched — with
/// thousands waiting behind a lagging lane, a round costs what it writes, not what waits.
#[derive(Default)]
pub(super) struct TakeSchedule {
    /// With the bytes each charges to the budget, and when it is due; `None` once settled.
    events: VecDeque<Option<(Arc<JobEvent>, u64, Instant)>>,
    /// Where each waiting take is: its number, counted from the writer's start; `first` is
    /// the number of `events[0]`.
    at: HashMap<String, u64>,
    first: u64,
}

impl TakeSchedule {
    pub(super) fn take(&mut self, event: Arc<JobEvent>, charge: u64, due: Instant) {
        self.at
            .insert(event.id.clone(), self.first + self.events.len() as u64);
        self.events.push_back(Some((event, charge, due)));
    }

    /// Drops settled takes from the front.
    pub(super) fn trim(&mut self) {
        while let Some(None) = self.events.front() {
            self.events.pop_front();
            self.first += 1;
        }
    }

    /// When the first take is due, if any waits.
    pub(super) fn next_due(&mut self) -> Option<Instant> {
        self.trim();
        self.events
            .front()
            .and_then(|t| t.as_ref())
            .map(|(_, _, due)| *due)
    }

    /// The takes due by `now` (all of them with `all`), in order, and — oldest first — as many
    /// more as charge `excess` bytes; the others stay.
    pub(super) fn due(
        &mut self,
        now: Instant,
        all: bool,
        excess: u64,
    ) -> Vec<(Arc<JobEvent>, u64, Instant)> {
        let mut due = Vec::new();
        let mut covered = 0;
        loop {
            self.trim();
            match self.events.front() {
                Some(Some((_, _, at))) if all || *at <= now || covered < excess => {}
                _ => return due,
            }
            if let Some(Some((event, charge, at))) = self.events.pop_front() {
                // A later take of the same id keeps its own place.
                if self.at.get(&event.id) == Some(&self.first) {
                    self.at.remove(&event.id);
                }
                self.first += 1;
                covered += charge;
                due.push((event, charge, at));
            }
        }
    }

    /// Puts the takes of a failed batch back at the front, in the order they came and with
    /// the times they were due: they go with the next round, ahead of later takes.
    pub(super) fn put_back(&mut self, failed: Vec<(Arc<JobEvent>, u64, Instant)>) {
        for (event, charge, due) in failed.into_iter().rev() {
            self.first -= 1;
            self.at.entry(event.id.clone()).or_insert(self.first);
            self.events.push_front(Some((event, charge, due)));
        }
    }

    /// The mark of `event_id` goes: cancelled if its take still waits (its charge given
    /// back), else removed.
    pub(super) fn settle(
        &mut self,
        batch: &mut WriteBatch,
        plugin: &str,
        event_id: Option<String>,
        budget: &MemoryBudget,
    ) {
        let Some(event_id) = event_id else { return };
        match self.at.remove(&event_id) {
            Some(number) => {
                let waiting = usize::try_from(number - self.first)
                    .ok()
                    .and_then(|i| self.events.get_mut(i))
                    .and_then(Option::take);
                if let Some((_, charge, _)) = waiting {
                    budget.stored(charge);
                }
            }
            None => batch.settled.push(Settled {
                plugin: plugin.to_string(),
                event_id,
            }),
        }
    }

    pub(super) fn is_empty(&mut self) -> bool {
        self.trim();
        self.events.is_empty()
    }

    /// The takes left standing, in order; empty afterwards.
    pub(super) fn drain(&mut self) -> impl Iterator<Item = (Arc<JobEvent>, u64)> + '_ {
        self.at.clear();
        self.first += self.events.len() as u64;
        self.events
            .drain(..)
            .flatten()
            .map(|(event, charge, _)| (event, charge))
    }
}
