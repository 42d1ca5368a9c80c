//! A map keyed by job uid that grows without doubling all at once.
//!
//! A lane and a watch stream each keep a record per job, a million of them on a large fleet.
//! A single hash table doubles when it fills: for a moment it holds the old table and a new
//! one twice its size, and at a million jobs of ~140 bytes that moment is a few hundred MiB
//! above the steady state — the backlog bench's peak RSS rose in such steps during an
//! unpaced ingest. [`UidMap`] splits the jobs over [`SHARDS`] tables by the uid's own bits,
//! so a table that grows is a sixty-fourth of the whole, and so is the moment's extra memory.
//! Lookups cost one more index; the steady memory is the same.

use std::collections::HashMap;
use std::collections::hash_map::Entry;

use crate::uid::Uid;

/// How many tables a map is split into.
pub const SHARDS: usize = 64;

/// A map from [`Uid`] to `V`, in [`SHARDS`] tables. Iteration order is unspecified, as with
/// a `HashMap`.
#[derive(Debug)]
pub struct UidMap<V> {
    shards: Box<[HashMap<Uid, V>]>,
}

impl<V> Default for UidMap<V> {
    fn default() -> UidMap<V> {
        UidMap {
            shards: (0..SHARDS).map(|_| HashMap::new()).collect(),
        }
    }
}

impl<V> UidMap<V> {
    fn shard(&self, uid: &Uid) -> &HashMap<Uid, V> {
        &self.shards[uid.spread() % SHARDS]
    }

    fn shard_mut(&mut self, uid: &Uid) -> &mut HashMap<Uid, V> {
        &mut self.shards[uid.spread() % SHARDS]
    }

    /// How many uids the map holds: a sum over the tables, so not free on a hot path.
    pub fn len(&self) -> usize {
        self.shards.iter().map(HashMap::len).sum()
    }

    /// Whether no table holds a uid.
    pub fn is_empty(&self) -> bool {
        self.shards.iter().all(HashMap::is_empty)
    }

    /// The value kept for `uid`.
    pub fn get(&self, uid: &Uid) -> Option<&V> {
        self.shard(uid).get(uid)
    }

    /// The value kept for `uid`, to change in place.
    pub fn get_mut(&mut self, uid: &Uid) -> Option<&mut V> {
        self.shard_mut(uid).get_mut(uid)
    }

    /// Whether the map holds `uid`.
    pub fn contains_key(&self, uid: &Uid) -> bool {
        self.shard(uid).contains_key(uid)
    }

    /// Keeps `value` for `uid`; returns the value it replaces.
    pub fn insert(&mut self, uid: Uid, value: V) -> Option<V> {
        self.shard_mut(&uid).insert(uid, value)
    }

    /// Takes `uid`'s value out of the map.
    pub fn remove(&mut self, uid: &Uid) -> Option<V> {
        self.shard_mut(uid).remove(uid)
    }

    /// The `HashMap` entry for `uid` in its table, to insert or update with one lookup.
    pub fn entry(&mut self, uid: Uid) -> Entry<'_, Uid, V> {
        self.shard_mut(&uid).entry(uid)
    }

    /// Keeps only the entries `keep` says yes to, table by table.
    pub fn retain(&mut self, mut keep: impl FnMut(&Uid, &mut V) -> bool) {
        for shard in self.shards.iter_mut() {
            shard.retain(&mut keep);
        }
    }

    /// Every entry, a table at a time.
    pub fn iter(&self) -> impl Iterator<Item = (&Uid, &V)> {
        self.shards.iter().flat_map(HashMap::iter)
    }

    /// The entries of table `part` (of [`SHARDS`]) alone: a reader that walks the map a
    /// table at a time can let go of a lock between tables. Empty past the last table.
    pub fn part(&self, part: usize) -> impl Iterator<Item = (&Uid, &V)> {
        self.shards.get(part).into_iter().flat_map(HashMap::iter)
    }

    /// Every entry, a table at a time, values changeable in place.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&Uid, &mut V)> {
        self.shards.iter_mut().flat_map(HashMap::iter_mut)
    }

    /// Every value, a table at a time.
    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.shards.iter().flat_map(HashMap::values)
    }

    /// Every value, a table at a time, changeable in place.
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut V> {
        self.shards.iter_mut().flat_map(HashMap::values_mut)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uuid(i: u32) -> Uid {
        Uid::new(&format!("0000{i:04x}-1111-2222-3333-4444555{i:05x}"))
    }

    /// Whatever table a uid lands in, the map answers as one map would; and the uids of a
    /// fleet spread over the tables, so none holds much more than its share.
    #[test]
    fn behaves_as_one_map_and_spreads_the_jobs() {
        let mut map = UidMap::default();
        let mut plain = HashMap::new();
        for i in 0..20_000u32 {
            let uid = if i % 3 == 0 {
                Uid::new(&format!("job-{i}"))
            } else {
                uuid(i)
            };
            map.insert(uid.clone(), i);
            plain.insert(uid, i);
        }
        assert_eq!(map.len(), plain.len());
        for (uid, value) in &plain {
            assert_eq!(map.get(uid), Some(value));
        }
        map.retain(|_, v| *v % 2 == 0);
        plain.retain(|_, v| *v % 2 == 0);
        assert_eq!(map.len(), plain.len());
        assert_eq!(map.iter().count(), plain.len());
        let removed = uuid(2);
        assert_eq!(map.remove(&removed), plain.remove(&removed));
        assert!(!map.contains_key(&removed));
        *map.entry(uuid(4)).or_insert(0) += 1;
        assert_eq!(map.get(&uuid(4)), Some(&5));
        let largest = map.shards.iter().map(HashMap::len).max().unwrap_or(0);
        assert!(
            largest < 3 * map.len() / SHARDS,
            "a table holds {largest} of {} jobs",
            map.len()
        );
        map.retain(|_, _| false);
        assert!(map.is_empty());
    }
}
