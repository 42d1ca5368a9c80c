//! The inbox: events a lane has taken and not yet settled, kept in the store so that what the
//! watch saw does not live only in memory.
//!
//! Each event is stored once (`inbox_events`, keyed by its id) however many plugins took it;
//! each plugin that took it has a mark (`inbox_marks`: plugin, event id, numbered in the order
//! the plugin took its events, which is the order they come back in). A lane's writes go to the
//! store as one [`WriteBatch`] per transaction: the events it took, the jobs it saw first, the
//! cursors it saved and removed, and the marks those cursors settle — so a cursor never moves
//! past an event whose mark stays, and a mark never outlives its cursor by a crash. After a
//! restart, or when a replica takes the plugin's delivery over, [`DeliveryStore::inbox`] gives
//! the plugin's marked events back, oldest first.
//!
//! Events whose last mark is gone are swept a while later ([`SWEEP_AFTER_SECONDS`]), not in the
//! transaction that removes the mark: another lane may be taking the same event at that moment
//! (it stores the event again if it is gone, so nothing is lost either way), and a sweep that
//! waits keeps the two from racing on a server database.
//!
//! [`DeliveryStore::inbox`]: super::DeliveryStore::inbox

use std::sync::Arc;

use super::cursor::Cursor;
use jobrelay_contract::event::JobEvent;

/// How old an event without marks must be before it is swept, in seconds.
pub const SWEEP_AFTER_SECONDS: i64 = 600;

/// One event a lane took: stored with a mark for the plugin until a cursor settles it.
///
/// The event is stored in two parts ([`JobEvent::head_json`]): its head as JSON and its
/// object's text as it is, shared with the event rather than copied or parsed again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taken {
    /// The plugin whose lane took it.
    pub plugin: String,
    /// The event's id (`cluster/uid/resource_version`), its key in the inbox.
    pub event_id: String,
    /// The event without its object, as JSON; written once per event id, with the object.
    pub head_json: String,
    /// The object's JSON text, the event's own.
    pub object_json: Arc<str>,
}

impl Taken {
    /// The event `plugin` took, as it is stored.
    pub fn of(plugin: &str, event: &JobEvent) -> Result<Taken, serde_json::Error> {
        Ok(Taken {
            plugin: plugin.to_string(),
            event_id: event.id.clone(),
            head_json: event.head_json()?,
            object_json: event.object_json.clone(),
        })
    }

    /// The bytes of the event as stored: what a statement carries.
    pub fn stored_len(&self) -> usize {
        self.head_json.len() + self.object_json.len()
    }
}

/// A mark to remove: the plugin is done with the event (delivered or dead-lettered).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settled {
    /// The plugin whose mark goes.
    pub plugin: String,
    /// The event the mark is on.
    pub event_id: String,
}

/// One batch of a lane's writes, carried out in one transaction in this order: the events
/// taken, the jobs first seen (kept if a cursor is there), the cursors saved, the cursors
/// removed, the marks settled. A mark taken and settled in one batch is gone at its end.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct WriteBatch {
    /// Events taken: each stored (if not already) with a mark for its plugin.
    pub taken: Vec<Taken>,
    /// Jobs first seen, as cursors with nothing delivered
    /// ([`note_first_sight`](crate::DeliveryStore::note_first_sight)); a cursor already there stays.
    pub first_sights: Vec<Cursor>,
    /// Cursors to write over by (plugin, cluster, uid).
    pub saved: Vec<Cursor>,
    /// Cursors to delete by (plugin, cluster, uid): the job's deletion was acknowledged.
    pub removed: Vec<Cursor>,
    /// Marks to delete.
    pub settled: Vec<Settled>,
    /// Also sweep events without marks older than [`SWEEP_AFTER_SECONDS`]. The sweep reads
    /// every event that old, marked or not, so a writer asks for it now and then, not with
    /// every batch: a backlog older than the delay would be read again by each one.
    pub sweep: bool,
}

impl WriteBatch {
    /// Whether the batch writes nothing, sweep included, so needs no transaction.
    pub fn is_empty(&self) -> bool {
        self.taken.is_empty()
            && self.first_sights.is_empty()
            && self.saved.is_empty()
            && self.removed.is_empty()
            && self.settled.is_empty()
            && !self.sweep
    }
}

/// A plugin's inbox as read back: its marked events, oldest first, and the marks that could
/// not be turned into an event (the row was damaged or its event is missing), named so the
/// operator can find them; those are left in place and the rest flow.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Inbox {
    /// The page's events, in the order the plugin took them.
    pub events: Vec<JobEvent>,
    /// When each of `events` was taken into the inbox (seconds since the epoch, the store's
    /// clock), in the same order: how long it has waited, across restarts.
    pub taken_at: Vec<i64>,
    /// The page's marks that gave no event.
    pub damaged: Vec<Damaged>,
    /// Where the next page starts (pass it as `after`); `None` once the end was read.
    pub next: Option<i64>,
}

/// Events read back per page when a lane resumes its inbox: a backlog of any size is read
/// a page at a time, and what the memory budget has no room for is let go again at once.
pub const INBOX_PAGE: u32 = 1_000;

/// The most events read back by id in one query: a lane gathers the read-backs its workers
/// ask for at once into batches of up to this many (a power of two).
pub const READ_BACK_BATCH: usize = 256;

/// One event of the inbox, read back by id.
#[derive(Debug, Clone, PartialEq)]
pub enum Stored {
    /// The event, decoded.
    Event(Box<JobEvent>),
    /// The row is there but does not decode (damaged by hand, or by a bug): why.
    Damaged(String),
    /// No event is stored under that id.
    Missing,
}

/// A mark whose event could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damaged {
    /// The id the mark names.
    pub event_id: String,
    /// Why no event came of it: its event does not decode (with the decoder's error), or
    /// is missing.
    pub reason: String,
}
