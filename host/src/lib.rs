//! jobrelay: watches training jobs on many Kubernetes clusters and hands every change, as a
//! versioned job event, to WebAssembly component plugins.
//!
//! Modules follow the data flow, and data flows one way:
//! `config` → `clusters` → `watch` → `lanes` → `runtime` → `capabilities`, with `telemetry`
//! beside them and `cli` on top.

pub mod cli;
pub mod clusters;
pub mod config;
pub mod control_loop;
pub mod coordination;
pub mod daemon;
pub mod plugin_set;
pub mod telemetry;
