//! jobrelay: watches training jobs on many Kubernetes clusters and hands every change, as a
//! versioned job event, to WebAssembly component plugins.
//!
//! This crate is the top layer: it composes the layer crates below it (`jobrelay-lanes`,
//! `-runtime`, `-capabilities`, `-state`, `-watch`, `-bindings`, `-contract`; the map is in
//! `docs/architecture.md`) into the process — the config folder and what it describes, the
//! clusters and their watchers, replicas' coordination, telemetry, the control loop and the
//! commands. Nothing below knows this crate.

#[expect(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "the command line's output is its interface: reports, tables and errors for the \
              person at the terminal, where the daemon's own output goes through `tracing`"
)]
pub mod cli;
pub mod clusters;
pub mod config;
pub mod daemon;
pub mod oci;
pub mod telemetry;
