//! The host objects behind a capability's WIT resources, held by the capability itself.
//!
//! A resource handle the plugin holds stands for a host object (an open log, an archive
//! writer). Each capability keeps its objects in its own [`Handles`] in its per-call state,
//! rather than in a table the whole store shares, for three reasons: the capability alone
//! decides how many a plugin may hold ([`Handles::new`] takes the bound), they end with the
//! call's state (a kept instance does not carry them into its next call), and the generated
//! bindings need not name any capability's types — a resource is only a number to them, and
//! the number is the key here.

use std::collections::HashMap;

use wasmtime::component::Resource;

/// Why a handle was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandleError {
    /// The bound is reached; the bound.
    #[error("at most {0} may be open at once")]
    Full(usize),
    /// No object is kept under the handle's number: never opened here, or already dropped.
    #[error("the handle is not open")]
    NotOpen,
}

/// Up to `max` host objects of one kind, each under the number its WIT handle carries.
pub struct Handles<T> {
    items: HashMap<u32, T>,
    next: u32,
    max: usize,
}

/// A set that holds nothing: the state of a capability that is not granted.
impl<T> Default for Handles<T> {
    fn default() -> Handles<T> {
        Handles::new(0)
    }
}

impl<T> Handles<T> {
    /// An empty set that holds at most `max` objects at once.
    pub fn new(max: usize) -> Handles<T> {
        Handles {
            items: HashMap::new(),
            next: 0,
            max,
        }
    }

    /// Keeps `item` and returns the owned handle the plugin gets for it.
    pub fn push<W: 'static>(&mut self, item: T) -> Result<Resource<W>, HandleError> {
        if self.items.len() >= self.max {
            return Err(HandleError::Full(self.max));
        }
        // Numbers are not reused while their object is open; `max` is far below `u32::MAX`,
        // so a free one is always found.
        while self.items.contains_key(&self.next) {
            self.next = self.next.wrapping_add(1);
        }
        let rep = self.next;
        self.next = self.next.wrapping_add(1);
        self.items.insert(rep, item);
        Ok(Resource::new_own(rep))
    }

    /// The object behind `handle`, for a call on the resource.
    pub fn get<W: 'static>(&self, handle: &Resource<W>) -> Result<&T, HandleError> {
        self.items.get(&handle.rep()).ok_or(HandleError::NotOpen)
    }

    /// The object behind `handle`, for a call on the resource that changes it.
    pub fn get_mut<W: 'static>(&mut self, handle: &Resource<W>) -> Result<&mut T, HandleError> {
        self.items
            .get_mut(&handle.rep())
            .ok_or(HandleError::NotOpen)
    }

    /// Ends the object a dropped handle stood for.
    pub fn remove<W: 'static>(&mut self, handle: Resource<W>) -> Result<T, HandleError> {
        self.items.remove(&handle.rep()).ok_or(HandleError::NotOpen)
    }

    /// How many are open.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether none is open.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Tag;

    #[test]
    fn the_bound_holds_and_a_freed_place_is_usable_again() {
        let mut handles = Handles::new(2);
        let a = handles.push::<Tag>("a").expect("room");
        let b = handles.push::<Tag>("b").expect("room");
        assert_eq!(handles.push::<Tag>("c").err(), Some(HandleError::Full(2)));
        assert_ne!(a.rep(), b.rep());
        assert_eq!(handles.get(&b), Ok(&"b"));
        assert_eq!(handles.remove(a), Ok("a"));
        let c = handles.push::<Tag>("c").expect("room after a drop");
        assert_eq!(handles.get(&c), Ok(&"c"));
        assert_eq!(handles.len(), 2);
    }

    #[test]
    fn a_handle_that_is_not_open_is_refused() {
        let mut handles = Handles::<&str>::new(4);
        let stale = handles.push::<Tag>("x").expect("room");
        let copy = Resource::<Tag>::new_borrow(stale.rep());
        handles.remove(stale).expect("open");
        assert_eq!(handles.get(&copy).err(), Some(HandleError::NotOpen));
    }
}
