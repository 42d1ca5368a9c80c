//! Watching jobs: one watcher per (cluster, job kind, namespace), turning object versions into
//! job events.

pub mod catch_up;
pub mod event;
pub mod finalizer;
pub mod kinds;
pub mod lenient;
pub mod normalize;
pub mod transition_key;
pub mod watcher;
