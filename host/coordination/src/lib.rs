//! Several replicas, one deliverer: leader election through a Lease on the home cluster.
//!
//! With `coordination.mode: leader` every replica loads its config, compiles its plugins and
//! watches every cluster, but only the one holding the Lease delivers (and manages jobrelay's
//! finalizer). The others stay warm, their connections, credentials and cluster health proven:
//! on taking the Lease a replica re-reads every lane's cursors from the shared state store,
//! lists every cluster again, and delivers what changed since the cursors were written, exactly
//! as after a restart. See `docs/delivery.md` for what this guarantees.
//!
//! With `coordination.mode: sharded` the clusters are spread over the replicas instead: each
//! holds one Lease per cluster it delivers (see [`shards`]).

// A layer crate: every public item says what it is for, since the next layer up reads its
// API (the lint is on in each layer crate; see the root Cargo.toml's [workspace.lints]).
#![warn(missing_docs)]

pub mod coordinator;
pub mod elector;
pub mod home;
pub mod lease;
pub mod members;
pub mod rendezvous;
pub mod settings;
pub mod shards;

pub use self::coordinator::Coordinator;
pub use self::elector::{Election, Role};
pub use self::home::HomeError;
pub use self::settings::{CoordinationSettings, Mode, SettingsError};
