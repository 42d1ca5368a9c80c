//! Watching jobs: one watcher per (cluster, job kind, namespace), turning object versions into
//! job events.
//!
//! This layer knows Kubernetes and the job kinds, and speaks only the contract's vocabulary
//! upward: a watcher sends [`jobrelay_contract::event::JobEvent`]s (inside observations) and
//! knows nothing of lanes, plugins or state.

pub mod catch_up;
pub mod finalizer;
mod json_pointer;
pub mod kinds;
pub mod lenient;
pub mod normalize;
pub mod object;
pub mod retry;
pub mod transition_key;
pub mod watcher;
