//! Lanes: one per plugin, each with its own queues and workers, so a slow or failing plugin
//! never delays another.
//!
//! Within a lane, events of one job are handled one at a time in the order they were observed;
//! different jobs run concurrently up to the plugin's concurrency. An event is acknowledged only
//! once its cursor is durable in the state store, and a deletion held by jobrelay's finalizer
//! is let go once every lane that wants the job is done with it.
//!
//! The modules, in the order an observed version goes through them:
//!
//! - [`dispatcher`]: takes the watchers' observations, in order, and offers each to the lanes
//!   of the plugins that want its kind and whose filter takes it ([`Routes`](dispatcher::Routes)).
//! - [`filter`]: a plugin's filter — which jobs, and which of their versions — judged before an
//!   event is copied for a lane.
//! - [`recent`]: the last few events the dispatcher saw, for the status page.
//! - [`event_counts`]: events by cluster and configured kind: observed, delivered, retried,
//!   dead-lettered.
//! - [`lane`]: one plugin's lane: takes versions in (missed transitions first after a gap),
//!   runs a pool of workers, one per busy job, calls, retries, settles; its
//!   [`writer`](lane::writer) writes everything the lane stores — takes into the inbox, first
//!   sights, cursors, removals, marks, sweeps — by group commit, one transaction a round.
//! - [`settings`]: a lane's settings from the plugin's manifest: mode, concurrency, retries,
//!   rate limits, kinds, filter, the bound on a job's queue.
//! - [`rate_limit`]: the rate limits as sliding windows over the calls made, so a limit of N a
//!   minute never lets more than N meet any sixty seconds — from the first call, across a
//!   reload and a restart.
//! - [`mode`]: which observed versions of a job the plugin receives (a pure decision).
//! - [`queue`]: the lane's per-job queues, as a state machine with no tasks and no I/O.
//! - [`budget`]: the process-wide bound on the bytes of events the lanes keep in memory;
//!   past it, queued events wait only in the store's inbox.
//! - [`handler`]: what a lane calls for each event: a plugin version, or any
//!   [`Handler`](handler::Handler).
//! - [`call_stats`]: how the plugin's calls went: durations and failures by kind.
//! - [`read_back`]: the lane's reads of events waiting only in the inbox, gathered into
//!   batches.
//! - [`store_writes`]: whether the lanes' writes reach the store (readiness).
//! - [`finalizer_book`]: which lanes still owe a held job its deletion; the finalizer is
//!   released once none does, or the hold is too old.
//! - [`trace`]: what became of a plugin's latest calls, job by job, for the job view.

// A layer crate: every public item says what it is for, since the next layer up reads its
// API (the lint is on in each layer crate; see the root Cargo.toml's [workspace.lints]).
#![warn(missing_docs)]

pub mod budget;
pub mod call_stats;
pub mod dispatcher;
pub mod event_counts;
pub mod filter;
pub mod finalizer_book;
pub mod handler;
pub mod lane;
pub mod mode;
pub mod queue;
pub mod rate_limit;
pub mod read_back;
pub mod recent;
pub mod settings;
pub mod store_writes;
pub mod trace;
