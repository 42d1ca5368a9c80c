//! What the benchmarks of this crate share: a global allocator that counts the bytes live on
//! the heap, so a structure's own share is measured exactly (what it asks for, without the
//! allocator's overhead).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicI64, Ordering};

/// The system allocator, counting.
pub struct Counting;

/// Bytes live on the heap now.
pub static LIVE: AtomicI64 = AtomicI64::new(0);

// SAFETY: every method hands its arguments unchanged to the system allocator, which keeps the
// `GlobalAlloc` contract; the counting beside it only adds to an atomic and allocates nothing.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as i64, Ordering::Relaxed);
        // SAFETY: the caller's `layout`, under the contract the caller of `alloc` keeps.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as i64, Ordering::Relaxed);
        // SAFETY: `ptr` came from this allocator, that is from `System`, with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new: usize) -> *mut u8 {
        LIVE.fetch_add(new as i64 - layout.size() as i64, Ordering::Relaxed);
        // SAFETY: `ptr` came from `System` with `layout`; `new` is the caller's valid size.
        unsafe { System.realloc(ptr, layout, new) }
    }
}
