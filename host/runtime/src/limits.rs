//! The per-store memory limit.
//!
//! wasmtime's `StoreLimits` caps each linear memory on its own, so a component with several
//! memories could use a multiple of its limit. This limiter keeps one budget for the whole
//! store instead: memories only grow (wasm has no shrink), so the sum of approved growths is
//! exactly the memory the plugin holds. It also remembers that it refused a growth, which is
//! how a trap that follows (Rust aborts when its allocator gets no memory) is reported as
//! "memory limit" rather than as an anonymous trap.

use wasmtime::{ResourceLimiter, Result};

/// Table elements are pointer-sized host allocations; the pooling allocator caps them on its
/// own, this cap applies when the engine fell back to on-demand allocation.
const MAX_TABLE_ELEMENTS: usize = 1_000_000;

/// Memory budget of one store (one plugin call).
#[derive(Debug, Clone)]
pub(crate) struct MemoryBudget {
    limit_bytes: usize,
    used_bytes: usize,
    /// Growth approved by the last `memory_growing`, undone if the growth then fails.
    pending_bytes: usize,
    refused: bool,
}

impl MemoryBudget {
    pub(crate) fn new(limit_bytes: u64) -> MemoryBudget {
        MemoryBudget {
            limit_bytes: usize::try_from(limit_bytes).unwrap_or(usize::MAX),
            used_bytes: 0,
            pending_bytes: 0,
            refused: false,
        }
    }

    /// Whether a memory growth (or the initial memory) was refused because of the budget.
    pub(crate) fn refused(&self) -> bool {
        self.refused
    }

    /// Linear memory held by the store's instances, in bytes.
    pub(crate) fn used_bytes(&self) -> usize {
        self.used_bytes
    }
}

impl ResourceLimiter for MemoryBudget {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> Result<bool> {
        let growth = desired.saturating_sub(current);
        let within_budget = self
            .used_bytes
            .checked_add(growth)
            .is_some_and(|total| total <= self.limit_bytes);
        if !within_budget {
            self.refused = true;
            return Ok(false);
        }
        if maximum.is_some_and(|max| desired > max) {
            // Beyond the memory's own declared maximum (or the pool's ceiling): wasm semantics
            // say the grow fails, which is the plugin's own business, not our limit.
            return Ok(false);
        }
        self.used_bytes += growth;
        self.pending_bytes = growth;
        Ok(true)
    }

    fn memory_grow_failed(&mut self, _error: wasmtime::Error) -> Result<()> {
        self.used_bytes = self.used_bytes.saturating_sub(self.pending_bytes);
        self.pending_bytes = 0;
        Ok(())
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> Result<bool> {
        Ok(desired <= MAX_TABLE_ELEMENTS && maximum.is_none_or(|max| desired <= max))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: usize = 64 * 1024;

    #[test]
    fn budget_is_shared_by_all_memories_of_a_store() {
        let mut b = MemoryBudget::new((4 * PAGE) as u64);
        assert!(b.memory_growing(0, 2 * PAGE, None).expect("ok"));
        assert!(b.memory_growing(0, 2 * PAGE, None).expect("ok"));
        assert!(!b.refused());
        assert!(!b.memory_growing(2 * PAGE, 3 * PAGE, None).expect("ok"));
        assert!(b.refused());
        assert_eq!(b.used_bytes(), 4 * PAGE);
    }

    #[test]
    fn failed_growth_is_given_back() {
        let mut b = MemoryBudget::new((4 * PAGE) as u64);
        assert!(b.memory_growing(0, 3 * PAGE, None).expect("ok"));
        b.memory_grow_failed(wasmtime::Error::msg("os said no"))
            .expect("ok");
        assert_eq!(b.used_bytes(), 0);
        assert!(b.memory_growing(0, 4 * PAGE, None).expect("ok"));
    }

    #[test]
    fn own_maximum_is_not_a_budget_refusal() {
        let mut b = MemoryBudget::new((16 * PAGE) as u64);
        assert!(
            !b.memory_growing(PAGE, 3 * PAGE, Some(2 * PAGE))
                .expect("ok")
        );
        assert!(!b.refused());
    }
}
