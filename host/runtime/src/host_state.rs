//! The data of one `Store`, i.e. of one plugin call.
//!
//! A store lives for one call and is dropped with everything the plugin opened, so nothing
//! here is shared between calls or plugins. It carries the WASI context the capabilities set
//! up from the plugin's grants, the memory budget, the labels every log line is tagged with,
//! and the call's deadline state.

use std::time::Instant;

use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use wasmtime_wasi_http::{WasiHttpCtxView, WasiHttpView};

use jobrelay_capabilities::log::LogView;
use jobrelay_capabilities::{CallLabels, CapabilityState};

use super::limits::MemoryBudget;
use jobrelay_bindings as bindings;

/// Entries one store's resource table may hold: WASI files, streams and pollables, and
/// `wasi:http` requests and bodies. Many are host handles (an open file is a file descriptor),
/// so a plugin opening files in a loop would otherwise take the process's descriptors from
/// every other plugin and cluster. Far above what a plugin needs (16 HTTP requests at once
/// take about 200); one more fails the plugin's call.
pub const MAX_STORE_RESOURCES: usize = 1024;

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
        let mut table = ResourceTable::new();
        table.set_max_capacity(MAX_STORE_RESOURCES);
        HostState {
            wasi,
            table,
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
    /// and deadline. What the last call opened and left open (pod logs, archive writers) is
    /// dropped with its capability state, as it would be with its store.
    pub(crate) fn renew(
        &mut self,
        mut caps: CapabilityState,
        labels: CallLabels,
        deadline: Instant,
    ) {
        std::mem::swap(&mut caps.stdio, &mut self.caps.stdio);
        self.caps = caps;
        self.labels = labels;
        self.deadline = deadline;
        self.timed_out = false;
    }

    /// What the log capability reaches: the call's line budget and labels.
    pub(crate) fn log(&mut self) -> LogView<'_> {
        LogView {
            throttle: &mut self.caps.log,
            labels: &self.labels,
        }
    }
}

impl WasiHttpView for HostState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        self.caps.http.view(&mut self.table)
    }
}

/// The `types` and `fleet` interfaces have no functions; their host side is empty.
impl bindings::jobrelay::plugin::types::Host for HostState {}
impl bindings::jobrelay::plugin::fleet::Host for HostState {}
impl bindings::v0_1::jobrelay::plugin::types::Host for HostState {}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}
