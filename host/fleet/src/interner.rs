//! Values many jobs share, kept once: namespaces, kinds, raw phases and label sets.
//!
//! A fleet's jobs repeat a few namespaces and kinds, a handful of raw phases, and label sets
//! that come from a few templates; a job record names each by a 4-byte [`Sym`] instead of
//! holding its own copy. Entries are counted, so a value no job names any more is let go
//! (namespaces and label sets come and go with the jobs), and its slot is reused.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;

/// An interned value's slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Sym(u32);

impl Sym {
    /// The slot as an index, for tables kept beside the interner (a query's verdict per
    /// label set).
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Counted, shared values of one type.
#[derive(Debug)]
pub struct Interner<T: Eq + Hash> {
    slots: Vec<Option<(Arc<T>, u32)>>,
    index: HashMap<Arc<T>, Sym>,
    free: Vec<u32>,
}

impl<T: Eq + Hash> Default for Interner<T> {
    fn default() -> Interner<T> {
        Interner {
            slots: Vec::new(),
            index: HashMap::new(),
            free: Vec::new(),
        }
    }
}

impl<T: Eq + Hash> Interner<T> {
    /// The slot of `value`, counted once more.
    pub fn intern(&mut self, value: T) -> Sym {
        if let Some(&sym) = self.index.get(&value) {
            if let Some((_, refs)) = &mut self.slots[sym.index()] {
                *refs += 1;
            }
            return sym;
        }
        let shared = Arc::new(value);
        let sym = match self.free.pop() {
            Some(slot) => {
                self.slots[slot as usize] = Some((shared.clone(), 1));
                Sym(slot)
            }
            None => {
                let slot = u32::try_from(self.slots.len()).unwrap_or(u32::MAX);
                self.slots.push(Some((shared.clone(), 1)));
                Sym(slot)
            }
        };
        self.index.insert(shared, sym);
        sym
    }

    /// The slot of a value already interned, counted once more (a record copied).
    pub fn retain(&mut self, sym: Sym) {
        if let Some(Some((_, refs))) = self.slots.get_mut(sym.index()) {
            *refs += 1;
        }
    }

    /// One reference to `sym` is gone; the value goes with the last.
    pub fn release(&mut self, sym: Sym) {
        let Some(slot) = self.slots.get_mut(sym.index()) else {
            return;
        };
        let last = match slot {
            Some((_, refs)) if *refs > 1 => {
                *refs -= 1;
                false
            }
            Some(_) => true,
            None => false,
        };
        if last && let Some((value, _)) = slot.take() {
            self.index.remove(&value);
            self.free.push(sym.0);
        }
    }

    /// The value in `sym`'s slot.
    pub fn get(&self, sym: Sym) -> Option<&T> {
        self.slots
            .get(sym.index())
            .and_then(|slot| slot.as_ref())
            .map(|(value, _)| &**value)
    }

    /// The slot of `value`, if interned (a query's filter looked up once).
    pub fn find(&self, value: &T) -> Option<Sym> {
        self.index.get(value).copied()
    }

    /// How many slots there are, used or free (the size of a table indexed by [`Sym`]).
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    /// Values held.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether no value is held (free slots may remain).
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_lives_while_named_and_its_slot_is_reused() {
        let mut names: Interner<String> = Interner::default();
        let a = names.intern("team-a".into());
        let again = names.intern("team-a".into());
        assert_eq!(a, again);
        let b = names.intern("team-b".into());
        assert_ne!(a, b);
        names.release(a);
        assert_eq!(names.get(a).map(String::as_str), Some("team-a"));
        names.release(a);
        assert_eq!(names.get(a), None);
        assert_eq!(names.len(), 1);
        let c = names.intern("team-c".into());
        assert_eq!(c, a, "the freed slot is reused");
        assert_eq!(names.slots(), 2);
        assert_eq!(names.find(&"team-b".to_string()), Some(b));
    }
}
