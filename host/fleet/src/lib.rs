//! The fleet's picture: every job on every cluster this replica watches, answered from
//! memory, and how available each cluster is.
//!
//! - [`availability`]: a cluster's online / degraded / offline verdict, with hysteresis.
//! - [`cleanup`]: the finished jobs `cleanup:` deletes — which are due, and what still holds
//!   each — as pure state fed by every observation, beside the view that is fed the same way;
//!   the daemon makes the deletions.
//! - [`jobs`]: the view — fed with every observation, queried with filters, an order and
//!   pages; deleted jobs kept for a while; its `job_view:` section in [`jobs::spec`].
//! - [`record`]: what is kept of one job (a few dozen bytes).
//! - [`interner`]: namespaces, kinds, raw phases and label sets, kept once.
//! - [`query`]: a request's parameters, checked, and the continue token.
//! - `order`: where a job falls in a list's order, the key a page is cut at.
//! - [`rules`]: fleet rules on those SLIs, firing after they held a while and resolving; the
//!   `fleet:` section that writes them in [`rules::spec`].
//! - [`timers`]: a job that stays too long pending, queued or running fires its timer once
//!   and resolves it when it moves on; the `fleet.timers` that write them in [`timers::spec`].
//! - [`sli`]: queue wait, run time, ends and restarts per cluster × namespace × kind, from the
//!   transitions the view sees live.

// A layer crate: every public item says what it is for, since the next layer up reads its
// API (the lint is on in each layer crate; see the root Cargo.toml's [workspace.lints]).
#![warn(missing_docs)]

pub mod availability;
pub mod cleanup;
pub mod interner;
pub mod jobs;
mod order;
pub mod query;
pub mod record;
pub mod rules;
pub mod sli;
pub mod timers;
