//! The object store: what etcd plus the watch cache are to a real apiserver.
//!
//! * One global, monotonically increasing resourceVersion (a `u64` rendered as a string), bumped
//!   by every committed write, so RVs order all changes across all resources as etcd revisions do.
//! * Objects keyed by (resource, namespace, name), kept sorted so lists come out ordered by
//!   namespace then name, like the real server's key order.
//! * A bounded history of committed changes. Watches resume from it and older list pages are
//!   rebuilt from it; anything older than the compaction horizon is gone, which is what makes
//!   a stale resourceVersion answer `410 Expired`.
//! * A `tokio::sync::watch` channel carrying the newest RV, which wakes watch streams.
//!
//! The store only commits; the API rules (validation, finalizers, generation) live in
//! `writes.rs`, and list pagination in `list.rs`.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::{Mutex, MutexGuard};
use serde_json::{Value, json};
use tokio::sync::watch;

use super::meta::set_meta;
use super::resources::Gvr;

/// The first resourceVersion of a fresh simulator. Non-zero because `"0"` means "any version"
/// to list and watch.
pub(crate) const INITIAL_RV: u64 = 1000;

/// A watch event type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    /// The wire name (`ADDED`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// Where an object lives.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct ObjKey {
    pub gvr: Gvr,
    pub namespace: String,
    pub name: String,
}

impl ObjKey {
    pub(crate) fn new(gvr: &Gvr, namespace: &str, name: &str) -> ObjKey {
        ObjKey {
            gvr: gvr.clone(),
            namespace: namespace.to_string(),
            name: name.to_string(),
        }
    }
}

/// One committed change, as kept in the history.
#[derive(Debug)]
pub(crate) struct Change {
    pub rv: u64,
    pub event: EventType,
    pub key: ObjKey,
    /// The object after the change (for deletions: its last state, stamped with the RV of the
    /// deletion, as etcd-backed watches report it).
    pub object: Arc<Value>,
    /// The stored object before the change; `None` for creations. Watches use it to turn an
    /// object that stops matching a selector into a DELETED event, and old list pages use it
    /// to roll the store back to a past RV.
    pub prev: Option<Arc<Value>>,
}

/// Pod logs are kept per (namespace, pod, container, previous).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct LogKey {
    pub namespace: String,
    pub pod: String,
    pub container: String,
    pub previous: bool,
}

/// Mutable store state, reachable only through [`Store::write`] / [`Store::read`].
pub(crate) struct StoreInner {
    pub rv: u64,
    pub objects: BTreeMap<ObjKey, Arc<Value>>,
    history: VecDeque<Arc<Change>>,
    history_limit: usize,
    /// Changes with `rv <= horizon` are no longer available.
    pub horizon: u64,
    pub logs: HashMap<LogKey, Bytes>,
    /// UIDs deleted with `propagationPolicy: Orphan` that are still waiting on finalizers.
    pub orphan_uids: HashSet<String>,
    pub garbage_collection: bool,
}

impl StoreInner {
    /// Commits a create or update: bumps the RV, stamps it on the object, records history.
    pub(crate) fn commit_put(
        &mut self,
        key: ObjKey,
        mut object: Value,
        event: EventType,
    ) -> Arc<Value> {
        self.rv += 1;
        set_meta(
            &mut object,
            "resourceVersion",
            Some(json!(self.rv.to_string())),
        );
        let object = Arc::new(object);
        let prev = self.objects.insert(key.clone(), object.clone());
        self.record(Change {
            rv: self.rv,
            event,
            key,
            object: object.clone(),
            prev,
        });
        object
    }

    /// Commits a removal. `last_state` is what the DELETED event carries (stamped with the
    /// new RV). Logs of a removed pod go with it.
    pub(crate) fn commit_remove(&mut self, key: ObjKey, mut last_state: Value) -> Arc<Value> {
        self.rv += 1;
        set_meta(
            &mut last_state,
            "resourceVersion",
            Some(json!(self.rv.to_string())),
        );
        let object = Arc::new(last_state);
        let prev = self.objects.remove(&key);
        if key.gvr == Gvr::POD {
            self.logs
                .retain(|k, _| !(k.namespace == key.namespace && k.pod == key.name));
        }
        self.record(Change {
            rv: self.rv,
            event: EventType::Deleted,
            key,
            object: object.clone(),
            prev,
        });
        object
    }

    fn record(&mut self, change: Change) {
        self.history.push_back(Arc::new(change));
        while self.history.len() > self.history_limit {
            if let Some(dropped) = self.history.pop_front() {
                self.horizon = dropped.rv;
            }
        }
    }

    /// Forgets all history: any RV older than the current one is now expired.
    pub(crate) fn compact(&mut self) {
        self.history.clear();
        self.horizon = self.rv;
    }

    /// Changes with `rv > since`, or `Err(horizon)` when some of them were compacted away.
    pub(crate) fn changes_since(&self, since: u64) -> Result<Vec<Arc<Change>>, u64> {
        if since < self.horizon {
            return Err(self.horizon);
        }
        let start = self.history.partition_point(|c| c.rv <= since);
        Ok(self.history.range(start..).cloned().collect())
    }

    /// Whether no object of one resource (optionally one namespace) changed after `rv`: the
    /// current objects are then the snapshot at `rv`, and a list page can be read from them
    /// in place. `Err(horizon)` when `rv` is older than the history.
    pub(crate) fn unchanged_since(
        &self,
        gvr: &Gvr,
        namespace: Option<&str>,
        rv: u64,
    ) -> Result<bool, u64> {
        if rv >= self.rv {
            return Ok(true);
        }
        if rv < self.horizon {
            return Err(self.horizon);
        }
        let start = self.history.partition_point(|c| c.rv <= rv);
        Ok(!self
            .history
            .range(start..)
            .any(|c| &c.key.gvr == gvr && namespace.is_none_or(|ns| c.key.namespace == ns)))
    }

    /// Current objects of one resource (optionally one namespace) after the key `after`, in
    /// key order.
    pub(crate) fn scan_after<'a>(
        &'a self,
        gvr: &'a Gvr,
        namespace: Option<&'a str>,
        after: Option<(&str, &str)>,
    ) -> impl Iterator<Item = (&'a ObjKey, &'a Arc<Value>)> + 'a {
        use std::ops::Bound;
        let start = match after {
            Some((ns, name)) => Bound::Excluded(ObjKey::new(gvr, ns, name)),
            None => Bound::Included(ObjKey::new(gvr, namespace.unwrap_or_default(), "")),
        };
        self.objects
            .range((start, Bound::Unbounded))
            .take_while(move |(k, _)| &k.gvr == gvr && namespace.is_none_or(|ns| k.namespace == ns))
    }

    /// Objects of one resource (optionally one namespace) as they were at `rv`, sorted by
    /// namespace and name. `Err(horizon)` when `rv` is older than the history.
    pub(crate) fn snapshot(
        &self,
        gvr: &Gvr,
        namespace: Option<&str>,
        rv: u64,
    ) -> Result<BTreeMap<(String, String), Arc<Value>>, u64> {
        let in_scope = |k: &ObjKey| &k.gvr == gvr && namespace.is_none_or(|ns| k.namespace == ns);
        let mut view: BTreeMap<(String, String), Arc<Value>> = self
            .scan(gvr, namespace)
            .map(|(k, v)| ((k.namespace.clone(), k.name.clone()), v.clone()))
            .collect();
        if rv >= self.rv {
            return Ok(view);
        }
        let newer = self.changes_since(rv)?;
        // Undo the newer changes, newest first.
        for change in newer.iter().rev().filter(|c| in_scope(&c.key)) {
            let k = (change.key.namespace.clone(), change.key.name.clone());
            match &change.prev {
                Some(prev) => view.insert(k, prev.clone()),
                None => view.remove(&k),
            };
        }
        Ok(view)
    }

    /// Current objects of one resource (optionally one namespace), in key order.
    pub(crate) fn scan<'a>(
        &'a self,
        gvr: &'a Gvr,
        namespace: Option<&'a str>,
    ) -> impl Iterator<Item = (&'a ObjKey, &'a Arc<Value>)> + 'a {
        let start = ObjKey::new(gvr, namespace.unwrap_or_default(), "");
        self.objects
            .range(start..)
            .take_while(move |(k, _)| &k.gvr == gvr && namespace.is_none_or(|ns| k.namespace == ns))
    }
}

/// The shared store handle.
pub(crate) struct Store {
    inner: Mutex<StoreInner>,
    notify: watch::Sender<u64>,
}

impl Store {
    pub(crate) fn new(history_limit: usize, garbage_collection: bool) -> Store {
        let (notify, _) = watch::channel(INITIAL_RV);
        Store {
            inner: Mutex::new(StoreInner {
                rv: INITIAL_RV,
                objects: BTreeMap::new(),
                history: VecDeque::new(),
                history_limit: history_limit.max(1),
                horizon: INITIAL_RV,
                logs: HashMap::new(),
                orphan_uids: HashSet::new(),
                garbage_collection,
            }),
            notify,
        }
    }

    fn lock(&self) -> MutexGuard<'_, StoreInner> {
        // The lock does not poison: a panic while holding it cannot leave the maps
        // half-updated in a way that matters for tests.
        self.inner.lock()
    }

    /// Runs a read-only closure under the lock.
    pub(crate) fn read<R>(&self, f: impl FnOnce(&StoreInner) -> R) -> R {
        f(&self.lock())
    }

    /// Runs a writing closure under the lock and wakes watchers if the RV moved.
    pub(crate) fn write<R>(&self, f: impl FnOnce(&mut StoreInner) -> R) -> R {
        let mut inner = self.lock();
        let before = inner.rv;
        let result = f(&mut inner);
        if inner.rv != before {
            self.notify.send_replace(inner.rv);
        }
        result
    }

    /// A receiver that changes whenever a write commits.
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.notify.subscribe()
    }

    pub(crate) fn current_rv(&self) -> u64 {
        self.read(|s| s.rv)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> ObjKey {
        ObjKey::new(&Gvr::BATCH_JOB, "ns", name)
    }

    fn obj(name: &str, v: i64) -> Value {
        json!({ "metadata": { "name": name, "namespace": "ns" }, "spec": { "v": v } })
    }

    #[test]
    fn rv_history_and_snapshots() {
        let store = Store::new(100, true);
        let (rv_a, rv_b) = store.write(|s| {
            s.commit_put(key("a"), obj("a", 1), EventType::Added);
            let rv_a = s.rv;
            s.commit_put(key("b"), obj("b", 1), EventType::Added);
            s.commit_put(key("a"), obj("a", 2), EventType::Modified);
            let rv_b = s.rv;
            s.commit_remove(key("b"), obj("b", 1));
            (rv_a, rv_b)
        });
        store.read(|s| {
            assert_eq!(s.rv, INITIAL_RV + 4);
            let at_a = s.snapshot(&Gvr::BATCH_JOB, Some("ns"), rv_a).unwrap();
            assert_eq!(at_a.len(), 1);
            assert_eq!(at_a[&("ns".into(), "a".into())]["spec"]["v"], 1);
            let at_b = s.snapshot(&Gvr::BATCH_JOB, None, rv_b).unwrap();
            assert_eq!(at_b.len(), 2);
            assert_eq!(at_b[&("ns".into(), "a".into())]["spec"]["v"], 2);
            let now = s.snapshot(&Gvr::BATCH_JOB, None, s.rv).unwrap();
            assert_eq!(now.len(), 1);
            assert_eq!(s.changes_since(rv_a).unwrap().len(), 3);
        });
        store.write(|s| s.compact());
        store.read(|s| {
            assert_eq!(s.changes_since(rv_b).err(), Some(s.rv));
            assert!(s.changes_since(s.rv).unwrap().is_empty());
        });
    }

    #[test]
    fn bounded_history_moves_horizon() {
        let store = Store::new(2, true);
        store.write(|s| {
            for i in 0..5 {
                s.commit_put(key("a"), obj("a", i), EventType::Modified);
            }
        });
        store.read(|s| {
            assert_eq!(s.horizon, INITIAL_RV + 3);
            assert!(s.changes_since(INITIAL_RV + 2).is_err());
            assert_eq!(s.changes_since(INITIAL_RV + 3).unwrap().len(), 2);
        });
    }
}
