//! The fleet's job view: one picture of every job on every cluster this replica watches,
//! answered from memory.
//!
//! - [`jobs`]: the view — fed with every observation, queried with filters, an order and
//!   pages; deleted jobs kept for a while.
//! - [`record`]: what is kept of one job (a few dozen bytes).
//! - [`interner`]: namespaces, kinds, raw phases and label sets, kept once.
//! - [`query`]: a request's parameters, checked, and the continue token.
//! - [`sli`]: queue wait, run time, ends and restarts per cluster × namespace × kind, from the
//!   transitions the view sees live.

pub mod interner;
pub mod jobs;
pub mod query;
pub mod record;
pub mod sli;
