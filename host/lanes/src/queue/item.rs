//! A queued item: where a queued event is held (whole, out for its call, or in the inbox
//! alone), and a job's list of them.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use compact_str::CompactString;

use jobrelay_contract::event::JobEvent;

/// A queued event; replays of dead letters bypass the mode and leave the cursor alone.
#[derive(Debug)]
pub(super) struct Item {
    pub(super) held: Kept,
    /// The event's resourceVersion, known whatever is held: a version being delivered or
    /// waiting in the inbox counts as queued when the same version is observed again.
    pub(super) resource_version: CompactString,
    pub(super) replay: bool,
    /// When it was queued, for the age of the oldest pending event.
    pub(super) queued_at: Instant,
}

/// Where a queued event is.
#[derive(Debug)]
pub(super) enum Kept {
    /// Kept whole, charging `charge` bytes to the lane's [`MemoryBudget`]. Shared with the
    /// lane's writer while it holds the event's take, so taking an event copies nothing.
    Here { event: Arc<JobEvent>, charge: u64 },
    /// Out with the job's worker for its call (the head only): the worker holds the event it
    /// delivers (shared, not copied), and gives it back with [`Queues::release`] when the call
    /// is cut short. `charge` is still held; `spilled`: the worker read the event back from
    /// the inbox (nothing charged), and it goes back to waiting there if given back.
    Out { charge: u64, spilled: bool },
    /// Waiting only in the inbox (the budget had no room when it was queued), to be read back
    /// when its turn comes. Its id is not kept: it is the job's cluster and uid and the item's
    /// resource version ([`JobEvent::make_id`]), and a lane far behind holds a million of
    /// these.
    Spilled,
}

/// Whether `event`'s id is the one [`JobEvent::make_id`] gives its job and version, so that
/// it can be queued as its place alone and its id made again to read it back. Every event the
/// watch or catch-up makes is; one that is not is kept whole whatever the budget.
pub(super) fn id_is_derived(event: &JobEvent) -> bool {
    let rest = event.id.strip_prefix(event.cluster.as_str());
    let rest = rest.and_then(|r| r.strip_prefix('/'));
    let rest = rest.and_then(|r| r.strip_prefix(event.uid.as_str()));
    let rest = rest.and_then(|r| r.strip_prefix('/'));
    rest == Some(event.resource_version.as_str())
}

/// A job's queued events: no allocation at all while the job is idle, which nearly every
/// tracked job is (8 bytes instead of an empty `VecDeque`'s 32).
#[derive(Debug, Default)]
#[expect(
    clippy::box_collection,
    reason = "the box is the point: 8 bytes per idle job instead of an empty VecDeque's 32"
)]
pub(super) struct Waiting(pub(super) Option<Box<VecDeque<Item>>>);

impl Waiting {
    pub(super) fn iter(&self) -> impl Iterator<Item = &Item> {
        self.0.iter().flat_map(|queue| queue.iter())
    }

    pub(super) fn front(&self) -> Option<&Item> {
        self.0.as_ref()?.front()
    }

    pub(super) fn front_mut(&mut self) -> Option<&mut Item> {
        self.0.as_mut()?.front_mut()
    }

    pub(super) fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |queue| queue.len())
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(super) fn push_back(&mut self, item: Item) {
        // Room for one at first: most jobs that wait hold one event, and a lane far behind
        // holds a million of them (the default growth would make room for four).
        self.0
            .get_or_insert_with(|| Box::new(VecDeque::with_capacity(1)))
            .push_back(item);
    }

    /// Every change that can empty the queue drops its buffer with it.
    pub(super) fn edit(&mut self, change: impl FnOnce(&mut VecDeque<Item>)) {
        if let Some(queue) = self.0.as_mut() {
            change(queue);
            if queue.is_empty() {
                self.0 = None;
            }
        }
    }

    pub(super) fn pop_front(&mut self) {
        self.edit(|queue| {
            queue.pop_front();
        });
    }

    pub(super) fn retain(&mut self, keep: impl FnMut(&Item) -> bool) {
        self.edit(|queue| queue.retain(keep));
    }

    /// Keeps the first `len` items; the rest are handed to `gone` on their way out.
    pub(super) fn truncate(&mut self, len: usize, mut gone: impl FnMut(&Item)) {
        self.edit(|queue| {
            for item in queue.range(len.min(queue.len())..) {
                gone(item);
            }
            queue.truncate(len);
        });
    }
}
