//! The operator's commands: running the daemon and tending a deployment of it.
//!
//! - [`run`] — `run`: the daemon, until a stop signal or a lost Lease, with the exit status;
//! - [`check`] — `check`: everything the daemon would refuse or fail on, found before it runs;
//! - [`dead_letters`] — `dead-letters list|replay|drop`, beside a running daemon;
//! - [`finalizers`] — `finalizers release`: jobrelay's finalizer removed from every job;
//! - [`jobs`] — `jobs list|show`: a running daemon's job view, over HTTP;
//! - [`state`] — `state backup`: a consistent copy of the SQLite state file;
//! - [`demo`] — `demo`: the whole product on a simulated cluster (the `demo` feature only).

pub mod check;
pub mod dead_letters;
#[cfg(feature = "demo")]
pub mod demo;
pub mod finalizers;
pub mod jobs;
pub mod run;
pub mod state;
