//! Watching jobs: one stream per (cluster, job kind, namespace), turning every version of a
//! job object into a job event.
//!
//! This layer knows Kubernetes and the job kinds, and speaks only the contract's vocabulary
//! upward: a stream sends [`JobEvent`](jobrelay_contract::event::JobEvent)s inside
//! [`Observation`](tracker::Observation)s and knows nothing of lanes, plugins or state. The
//! lanes call back into [`catch_up`] to rebuild what a job went through during a gap, and the
//! host into [`finalizer`] to let a held job go.
//!
//! The modules, in the order a job's version goes through them:
//!
//! - [`kinds`]: the job kinds as configured: which resource to watch, on which clusters, and
//!   which normalizer reads its status; the `kinds:` section's entries in [`kinds::spec`].
//! - [`watcher`]: the task that runs one stream: kube's watcher for one
//!   [`WatchTarget`](watcher::WatchTarget), its [`Progress`](watcher::Progress) for the
//!   cluster's health, finalizer adders, the observations sent on.
//! - [`retry`]: how long a failing stream waits before trying again (a pure state machine).
//! - [`lenient`]: every listed or watched object read on its own, so one bad object cannot
//!   blind a whole kind.
//! - [`object`]: one job object as read: its metadata, the status view normalizers read, its
//!   text as plugins get it.
//! - [`tracker`]: the per-job state of one stream: drops versions seen again, builds each new
//!   version's event and reports what a list found (a pure state machine).
//! - [`normalize`]: a kind's own status turned into one phase, with the raw phase, reason,
//!   message and time that decided it.
//! - [`rules`]: the normalizer written as data: an ordered list of rules over conditions,
//!   fields, counts and CEL expressions (the built-in TrainJob, JobSet and RayJob kinds are
//!   written in it).
//! - `json_pointer`: JSON pointer lookups that allocate nothing for plain tokens, for the
//!   normalizers and the catch-up.
//! - [`transition_key`]: the stay a version is in, and the transition key made of it.
//! - [`catch_up`]: a status's recorded history: when the current stay began (for its key),
//!   and the transitions missed in a gap, rebuilt as synthetic events.
//! - [`story`]: what the objects around a job say of it (its Kueue Workload, its pods' failing
//!   containers), each read into facts by a pure function; not yet joined to events.
//! - [`finalizer`]: jobrelay's finalizer on job objects: added while a job lives, removed once
//!   every plugin is done with its deletion; the `finalizers:` section in
//!   [`finalizer::spec`].

// A layer crate: every public item says what it is for, since the next layer up reads its
// API (the lint is on in each layer crate; see the root Cargo.toml's [workspace.lints]).
#![warn(missing_docs)]

pub mod catch_up;
pub mod error_text;
pub mod finalizer;
mod json_pointer;
pub mod kinds;
pub mod lenient;
pub mod normalize;
pub mod object;
pub mod retry;
pub mod rules;
pub mod story;
pub mod tracker;
pub mod transition_key;
pub mod watcher;
