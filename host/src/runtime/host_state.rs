//! The data of one `Store`, i.e. of one plugin call.
//!
//! A store lives for one call and is dropped with everything the plugin opened, so nothing
//! here is shared between calls or plugins. It carries the WASI context the capabilities set
//! up from the plugin's grants, the memory budget, the labels every log line is tagged with,
//! and the call's deadline state.

use std::sync::Arc;
use std::time::Instant;

use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use crate::capabilities::CapabilityState;

use super::limits::MemoryBudget;

/// Who is running: attached to every log line and captured output of the call.
#[derive(Debug, Clone)]
pub struct CallLabels {
    pub plugin: Arc<str>,
    pub version: Arc<str>,
    /// The id of the event being handled; `None` while only `init` runs (at load).
    pub event: Option<Arc<str>>,
}

impl CallLabels {
    /// The event id, or `-` outside an event, for log fields.
    pub fn event_or_dash(&self) -> &str {
        self.event.as_deref().unwrap_or("-")
    }
}

/// Per-store data.
pub struct HostState {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) labels: CallLabels,
    /// Per-store state of the capabilities (captured output, log throttle, ...).
    pub(crate) caps: CapabilityState,
    pub(crate) memory: MemoryBudget,
    /// Wall-clock deadline of the call; the epoch callback compares against it.
    pub(crate) deadline: Instant,
    /// Set by the epoch callback when it stops the plugin for running past `deadline`.
    pub(crate) timed_out: bool,
}

impl HostState {
    pub(crate) fn new(
        wasi: WasiCtx,
        caps: CapabilityState,
        labels: CallLabels,
        memory: MemoryBudget,
        deadline: Instant,
    ) -> HostState {
        HostState {
            wasi,
            table: ResourceTable::new(),
            labels,
            caps,
            memory,
            deadline,
            timed_out: false,
        }
    }
}

impl HostState {
    /// Readies a kept store for another call: the capability state for the new event
    /// (keeping the captured output streams, which the WASI context writes into), new labels
    /// and deadline.
    pub(crate) fn renew(
        &mut self,
        mut caps: CapabilityState,
        labels: CallLabels,
        deadline: Instant,
    ) {
        std::mem::swap(&mut caps.stdio, &mut self.caps.stdio);
        // What the last call opened and left open ends with it, as it would with its store.
        self.caps.archive.close_all(&mut self.table);
        self.caps = caps;
        self.labels = labels;
        self.deadline = deadline;
        self.timed_out = false;
    }

    /// The capability state and the resource table at once, for views that need both.
    pub(crate) fn caps_and_table(&mut self) -> (&mut CapabilityState, &mut ResourceTable) {
        (&mut self.caps, &mut self.table)
    }

    /// The store's resource table (resources the capabilities hand to the plugin).
    pub(crate) fn table(&mut self) -> &mut ResourceTable {
        &mut self.table
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}
