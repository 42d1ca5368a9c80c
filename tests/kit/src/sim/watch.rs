//! Watch streams: a chunked HTTP body carrying one JSON event per line.
//!
//! The stream follows the apiserver's contract as kube's watcher relies on it:
//! * with `resourceVersion=X`, every change after X is replayed from history, then live changes
//!   follow, in RV order; an X older than the compaction horizon yields a single `ERROR` event
//!   holding a `410 Expired` Status and the stream ends (the watcher then re-lists);
//! * without a resourceVersion (or `"0"`), the current objects arrive first as synthetic
//!   `ADDED` events (and with `sendInitialEvents`, a bookmark marks their end);
//! * selectors filter events, and an object that stops (starts) matching is sent as `DELETED`
//!   (`ADDED`), as the apiserver's watch cache does;
//! * `allowWatchBookmarks` adds periodic `BOOKMARK` events carrying only the RV;
//! * `timeoutSeconds` ends the stream cleanly (after a last bookmark).
//!
//! Each stream is a task feeding a channel, so fault injection can cut it (the body then fails
//! and the connection is torn down without a final chunk) or stall it.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::{Instant, MissedTickBehavior};

use super::SimState;
use super::resources::ResourceKind;
use super::selectors::{FieldSelector, LabelSelector};
use super::status::SimError;
use super::store::{Change, EventType};

/// One chunk of a watch body; an `Err` aborts the connection.
pub(crate) type Chunk = Result<Bytes, io::Error>;

/// A parsed watch request.
pub(crate) struct WatchRequest {
    pub kind: Arc<ResourceKind>,
    pub namespace: Option<String>,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
    /// `None` (or `Some(0)`) means "current state first"; else resume after this RV.
    pub resource_version: Option<u64>,
    pub bookmarks: bool,
    pub send_initial_events: bool,
    pub timeout: Duration,
}

impl WatchRequest {
    fn matches(&self, obj: &Value) -> bool {
        self.labels.matches(obj) && self.fields.matches(obj)
    }

    /// The event a change produces for this watch, if any.
    fn event_for(&self, change: &Change) -> Option<(EventType, Arc<Value>)> {
        if change.key.gvr != self.kind.gvr {
            return None;
        }
        if self
            .namespace
            .as_ref()
            .is_some_and(|ns| *ns != change.key.namespace)
        {
            return None;
        }
        let now = self.matches(&change.object);
        match change.event {
            EventType::Added => now.then(|| (EventType::Added, change.object.clone())),
            EventType::Deleted => now.then(|| (EventType::Deleted, change.object.clone())),
            EventType::Modified => {
                let before = change.prev.as_deref().is_some_and(|p| self.matches(p));
                match (before, now) {
                    (true, true) => Some((EventType::Modified, change.object.clone())),
                    (false, true) => Some((EventType::Added, change.object.clone())),
                    (true, false) => {
                        // The object left the selection: report its last matching state,
                        // stamped with the RV of the change.
                        let mut gone = change.prev.as_deref().cloned().unwrap_or(Value::Null);
                        if let Some(meta) = gone.get_mut("metadata") {
                            meta["resourceVersion"] = json!(change.rv.to_string());
                        }
                        Some((EventType::Deleted, Arc::new(gone)))
                    }
                    (false, false) => None,
                }
            }
        }
    }
}

/// Starts a watch stream; the returned receiver is the HTTP body.
pub(crate) fn start(state: Arc<SimState>, req: WatchRequest) -> mpsc::Receiver<Chunk> {
    let (tx, rx) = mpsc::channel(64);
    state.stats.count_watch(&req.kind.gvr);
    tokio::spawn(async move {
        let _ = run(&state, &req, &tx).await;
    });
    rx
}

/// Why a stream stopped early.
enum Stop {
    /// The client went away.
    Closed,
    /// Fault injection cut the stream.
    Dropped,
}

fn event_line(event: &str, object: &Value) -> Bytes {
    let mut line = format!("{{\"type\":\"{event}\",\"object\":").into_bytes();
    // Serialising a `Value` cannot fail.
    let _ = serde_json::to_writer(&mut line, object);
    line.extend_from_slice(b"}\n");
    Bytes::from(line)
}

fn bookmark_line(kind: &ResourceKind, rv: u64, initial_end: bool) -> Bytes {
    let mut metadata = json!({ "resourceVersion": rv.to_string() });
    if initial_end {
        metadata["annotations"] = json!({ "k8s.io/initial-events-end": "true" });
    }
    let object =
        json!({ "kind": kind.kind, "apiVersion": kind.api_version(), "metadata": metadata });
    event_line("BOOKMARK", &object)
}

async fn run(state: &SimState, req: &WatchRequest, tx: &mpsc::Sender<Chunk>) -> Result<(), Stop> {
    let _open = state.stats.watch_opened();
    let mut drop_rx = state.faults.drop_signal();
    drop_rx.borrow_and_update();
    let mut stall_rx = state.faults.stall_signal();
    let mut rv_rx = state.store.subscribe();
    rv_rx.borrow_and_update();

    let mut pending: Vec<Bytes> = Vec::new();
    let mut cursor = match req.resource_version.filter(|rv| *rv > 0) {
        Some(rv) if !req.send_initial_events => rv,
        _ => {
            let (objects, rv) = state.store.read(|s| {
                let objects: Vec<Arc<Value>> = s
                    .scan(&req.kind.gvr, req.namespace.as_deref())
                    .map(|(_, o)| o.clone())
                    .filter(|o| req.matches(o))
                    .collect();
                (objects, s.rv)
            });
            pending.extend(objects.iter().map(|o| event_line("ADDED", o)));
            if req.send_initial_events {
                pending.push(bookmark_line(&req.kind, rv, true));
            }
            rv
        }
    };

    let deadline = Instant::now() + req.timeout;
    let every = state
        .options
        .bookmark_interval
        .max(Duration::from_millis(10));
    let mut ticker = tokio::time::interval_at(Instant::now() + every, every);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);

    loop {
        let stalled = *stall_rx.borrow_and_update();
        if !stalled {
            rv_rx.borrow_and_update();
            let expired = collect(state, req, &mut cursor, &mut pending);
            flush(tx, &mut drop_rx, &mut pending).await?;
            if expired {
                return Ok(());
            }
        }
        tokio::select! {
            changed = rv_rx.changed() => if changed.is_err() { return Ok(()) },
            changed = stall_rx.changed() => if changed.is_err() { return Ok(()) },
            _ = drop_rx.changed() => return cut(tx).await,
            _ = tx.closed() => return Err(Stop::Closed),
            _ = ticker.tick(), if req.bookmarks && !stalled => {
                let expired = collect(state, req, &mut cursor, &mut pending);
                if !expired {
                    pending.push(bookmark_line(&req.kind, cursor, false));
                }
                flush(tx, &mut drop_rx, &mut pending).await?;
                if expired {
                    return Ok(());
                }
            }
            _ = tokio::time::sleep_until(deadline), if !stalled => {
                let expired = collect(state, req, &mut cursor, &mut pending);
                if req.bookmarks && !expired {
                    pending.push(bookmark_line(&req.kind, cursor, false));
                }
                flush(tx, &mut drop_rx, &mut pending).await?;
                return Ok(());
            }
        }
    }
}

/// Appends the events after `cursor` to `pending` and advances the cursor to the store's RV.
/// Returns true when the cursor had fallen behind the compaction horizon; the pending queue
/// then ends with the `410 Expired` error event.
fn collect(
    state: &SimState,
    req: &WatchRequest,
    cursor: &mut u64,
    pending: &mut Vec<Bytes>,
) -> bool {
    let (changes, now) = state.store.read(|s| (s.changes_since(*cursor), s.rv));
    match changes {
        Ok(changes) => {
            for change in &changes {
                if let Some((event, object)) = req.event_for(change) {
                    pending.push(event_line(event.as_str(), &object));
                }
            }
            *cursor = (*cursor).max(now);
            false
        }
        Err(horizon) => {
            let status =
                SimError::expired(format!("too old resource version: {cursor} ({horizon})"))
                    .to_status();
            pending.push(event_line("ERROR", &status));
            true
        }
    }
}

async fn flush(
    tx: &mpsc::Sender<Chunk>,
    drop_rx: &mut tokio::sync::watch::Receiver<u64>,
    pending: &mut Vec<Bytes>,
) -> Result<(), Stop> {
    for line in pending.drain(..) {
        tokio::select! {
            sent = tx.send(Ok(line)) => sent.map_err(|_| Stop::Closed)?,
            _ = drop_rx.changed() => return cut(tx).await,
        }
    }
    Ok(())
}

/// Ends the body with an error so the server aborts the connection mid-stream.
/// (A client that stopped reading may keep the channel full; give up after a while then.)
async fn cut(tx: &mpsc::Sender<Chunk>) -> Result<(), Stop> {
    let error = Err(io::Error::other("watch cut by fault injection"));
    let _ = tokio::time::timeout(Duration::from_secs(5), tx.send(error)).await;
    Err(Stop::Dropped)
}
