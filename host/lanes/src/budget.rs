//! The process-wide bound on the events the lanes hold in memory.
//!
//! Every event a lane accepts is taken into the store's inbox, so memory is only a cache of
//! it. [`MemoryBudget`] counts the bytes of the events the lanes hold — queued versions whole,
//! and the copies on their way to the inbox that no writer has stored yet — against one limit
//! for the whole process:
//!
//! - While the events kept whole take less than half the limit, a queued version is kept whole
//!   in its job's queue, ready for its call.
//! - Past that, a version is queued as its place alone (its version; the id is made again
//!   from it): the event waits only in the inbox, and the job's worker reads it back when its
//!   turn comes. A lane far behind thus holds a couple of hundred bytes per waiting event,
//!   whatever the backlog; order is kept, since the place is in the queue like any other.
//! - The copies on their way to the inbox cannot be dropped before they are stored. While they
//!   pass [`MemoryBudget::write_ahead`] — a sixteenth of the limit, between 256 KiB and 4 MiB
//!   — or push the total past the limit, the dispatcher takes no new observation
//!   ([`MemoryBudget::room`]), so the watch streams wait for the writers (the disk), not for
//!   any plugin: a slow plugin's versions are spilled and cost it nothing else. The bound on
//!   what is written ahead is also the bound on what a kill can take with it: an event
//!   accepted and not yet in the inbox lives only in memory, and a job deleted before the
//!   restart would leave nothing to rebuild it from. It is several of a writer's batches, so
//!   the watch is not held to one write per observation.
//!
//! A replayed dead letter is not charged: it is not in the inbox and cannot be spilled, and
//! charging it would let an operator's replay of a down plugin's letters stop the watch.
//!
//! The charge is an estimate of an event's size ([`charge_of`]): the object's JSON, its labels
//! and annotations and its strings, plus the struct. Each lane's copy is charged in full,
//! though the object's text is shared between lanes, and a take is charged again though it
//! shares the event its queue keeps whole, so the count is an upper bound.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::Notify;

use jobrelay_contract::event::JobEvent;

/// The default limit: a small share of the chart's 1 GiB, enough for tens of thousands of
/// typical job events in flight at once.
pub const DEFAULT_EVENT_MEMORY_BYTES: u64 = 128 * 1024 * 1024;

/// The bytes of events held in memory by every lane of the process, against one limit; and,
/// beside it, how the lanes' writes to the store go (the writers that spend and give back the
/// budget are the ones that see them fail).
#[derive(Debug)]
pub struct MemoryBudget {
    writes: crate::store_writes::StoreWrites,
    limit: u64,
    /// Everything held: the events kept whole and the copies not yet stored.
    held: AtomicU64,
    /// Of that, the events kept whole in the queues (at most half the limit).
    kept: AtomicU64,
    /// Of that, the copies on their way to the inbox, not stored yet.
    unstored: AtomicU64,
    /// Versions queued as their place alone (waiting only in the inbox), all lanes.
    spilled: AtomicU64,
    /// Woken when the total falls to the limit or below.
    room: Notify,
}

impl Default for MemoryBudget {
    /// No limit (see [`MemoryBudget::unbounded`]).
    fn default() -> MemoryBudget {
        MemoryBudget {
            writes: Default::default(),
            limit: u64::MAX,
            held: AtomicU64::new(0),
            kept: AtomicU64::new(0),
            unstored: AtomicU64::new(0),
            spilled: AtomicU64::new(0),
            room: Notify::new(),
        }
    }
}

impl MemoryBudget {
    /// A budget of `limit` bytes.
    pub fn new(limit: u64) -> Arc<MemoryBudget> {
        Arc::new(MemoryBudget {
            limit,
            ..MemoryBudget::default()
        })
    }

    /// No limit: everything is kept in memory (tests of other things, tools).
    pub fn unbounded() -> Arc<MemoryBudget> {
        Arc::default()
    }

    /// How the lanes' writes to the store go.
    pub fn writes(&self) -> &crate::store_writes::StoreWrites {
        &self.writes
    }

    /// The limit, in bytes.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Bytes held now.
    pub fn held(&self) -> u64 {
        self.held.load(Ordering::SeqCst)
    }

    /// Versions queued as their place alone, waiting only in the inbox.
    pub fn spilled(&self) -> u64 {
        self.spilled.load(Ordering::SeqCst)
    }

    /// Holds `bytes` for an event kept whole if the events kept stay within half the limit
    /// (the queues' share, whatever the copies on their way to the inbox hold); `false`
    /// (nothing held) otherwise. Given back with [`release_kept`](MemoryBudget::release_kept).
    pub fn try_hold(&self, bytes: u64) -> bool {
        let share = self.limit / 2;
        let kept = self
            .kept
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |kept| {
                let total = kept.saturating_add(bytes);
                (total <= share).then_some(total)
            })
            .is_ok();
        if kept {
            self.held.fetch_add(bytes, Ordering::SeqCst);
        }
        kept
    }

    /// Gives back `bytes` of an event that was kept whole.
    pub fn release_kept(&self, bytes: u64) {
        lower(&self.kept, bytes);
        self.release(bytes);
    }

    /// Holds `bytes` for an event kept whole whatever the total: one that cannot wait as its
    /// place alone. Given back with [`release_kept`](MemoryBudget::release_kept).
    pub fn keep(&self, bytes: u64) {
        self.kept.fetch_add(bytes, Ordering::SeqCst);
        self.held.fetch_add(bytes, Ordering::SeqCst);
    }

    /// Holds `bytes` whatever the total: a copy on its way to the inbox, which must stay until
    /// it is stored. Given back with [`stored`](MemoryBudget::stored).
    pub fn hold(&self, bytes: u64) {
        self.unstored.fetch_add(bytes, Ordering::SeqCst);
        self.held.fetch_add(bytes, Ordering::SeqCst);
    }

    /// Gives back `bytes` of a copy held with [`hold`](MemoryBudget::hold): stored, or let go.
    pub fn stored(&self, bytes: u64) {
        lower(&self.unstored, bytes);
        self.release(bytes);
    }

    /// The most bytes of copies on their way to the inbox before the dispatcher waits for the
    /// writers: a sixteenth of the limit, at least 256 KiB and at most 4 MiB (a few thousand
    /// typical events, several writer batches), and never more than half the limit.
    pub fn write_ahead(&self) -> u64 {
        (self.limit / 16)
            .clamp(256 * 1024, 4 * 1024 * 1024)
            .min(self.limit / 2)
    }

    /// Bytes of copies on their way to the inbox.
    pub fn unstored(&self) -> u64 {
        self.unstored.load(Ordering::SeqCst)
    }

    /// Whether the dispatcher may take the next observation.
    fn has_room(&self) -> bool {
        self.held() <= self.limit && self.unstored() <= self.write_ahead()
    }

    /// Gives `bytes` back.
    fn release(&self, bytes: u64) {
        if bytes == 0 {
            return;
        }
        lower(&self.held, bytes);
        if self.has_room() {
            self.room.notify_waiters();
        }
    }

    /// One more (or, with `false`, one fewer) version waiting only in the inbox.
    pub(crate) fn count_spilled(&self, more: bool, n: u64) {
        if more {
            self.spilled.fetch_add(n, Ordering::SeqCst);
        } else {
            lower(&self.spilled, n);
        }
    }

    /// Returns once the total is within the limit and the copies on their way to the inbox
    /// within [`write_ahead`](MemoryBudget::write_ahead): the dispatcher waits here before it
    /// takes the next observation.
    pub async fn room(&self) {
        loop {
            let notified = self.room.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.has_room() {
                return;
            }
            notified.await;
        }
    }
}

/// Lowers `counter` by `by`, never below zero.
fn lower(counter: &AtomicU64, by: u64) {
    let _ = counter.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
        Some(n.saturating_sub(by))
    });
}

/// What holding `event` in memory costs, estimated: its heap parts and the struct itself.
pub fn charge_of(event: &JobEvent) -> u64 {
    let strings = event.id.len()
        + event.transition_key.len()
        + event.cluster.len()
        + event.api_version.len()
        + event.kind.len()
        + event.namespace.len()
        + event.name.len()
        + event.uid.len()
        + event.resource_version.len()
        + event.raw_phase.len()
        + event.transition_time.len()
        + event.reason.as_ref().map_or(0, String::len)
        + event.message.as_ref().map_or(0, String::len);
    // A map entry costs its two strings and about a node's share besides.
    let maps: usize = event
        .labels
        .iter()
        .chain(event.annotations.iter())
        .map(|(k, v)| k.len() + v.len() + 64)
        .sum();
    (std::mem::size_of::<JobEvent>() + strings + maps + event.object_json.len()) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1024 * 1024;

    #[test]
    fn holds_within_the_limit_and_forces_past_it() {
        let budget = MemoryBudget::new(200);
        budget.hold(150);
        assert!(
            budget.try_hold(60),
            "the copies do not take the queues' half"
        );
        assert!(!budget.try_hold(41), "past the queues' half");
        assert!(budget.try_hold(40));
        assert_eq!(budget.held(), 250);
        budget.stored(150);
        budget.release_kept(100);
        assert_eq!((budget.held(), budget.unstored()), (0, 0));
        budget.stored(10);
        assert_eq!(
            (budget.held(), budget.unstored()),
            (0, 0),
            "never below zero"
        );
    }

    #[test]
    fn what_is_written_ahead_is_a_small_share_of_the_limit() {
        let ahead = |limit| MemoryBudget::new(limit).write_ahead();
        assert_eq!(ahead(128 * MIB), 4 * MIB, "the default: at most 4 MiB");
        assert_eq!(ahead(32 * MIB), 2 * MIB);
        assert_eq!(ahead(MIB), 256 * 1024, "at least 256 KiB");
        assert_eq!(ahead(100), 50, "never more than half the limit");
    }

    async fn waits(budget: &Arc<MemoryBudget>) -> tokio::task::JoinHandle<()> {
        let waiting = tokio::spawn({
            let budget = budget.clone();
            async move { budget.room().await }
        });
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        waiting
    }

    async fn finishes(waiting: tokio::task::JoinHandle<()>) {
        tokio::time::timeout(std::time::Duration::from_secs(5), waiting)
            .await
            .expect("room")
            .expect("task");
    }

    /// Copies not yet stored are bounded apart from the total: however much room the limit
    /// has, the dispatcher waits while more than the write-ahead is on its way to the inbox,
    /// so no more than that lives only in memory.
    #[tokio::test]
    async fn room_waits_while_too_much_is_on_its_way_to_the_inbox() {
        let budget = MemoryBudget::new(64 * MIB);
        budget.hold(budget.write_ahead() + 1);
        assert!(budget.held() < budget.limit() / 8, "far within the limit");
        let waiting = waits(&budget).await;
        assert!(
            !waiting.is_finished(),
            "too much unstored: the dispatcher waits"
        );
        budget.stored(1);
        finishes(waiting).await;
    }

    /// Events kept whole past the queues' share (ones that cannot be spilled) push the total
    /// over the limit: the dispatcher waits for them too.
    #[tokio::test]
    async fn room_waits_until_the_total_is_within_the_limit() {
        let budget = MemoryBudget::new(100);
        budget.keep(150);
        let waiting = waits(&budget).await;
        assert!(
            !waiting.is_finished(),
            "over the limit: the dispatcher waits"
        );
        budget.release_kept(50);
        finishes(waiting).await;
    }
}
