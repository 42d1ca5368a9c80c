//! The lanes' tests that drive a whole lane — its queues, workers, writer and a real SQLite
//! state store — from outside, as the daemon does: the bound on what a lane holds for a plugin
//! that is down, the catch-up of jobs it delivered nothing of, rate limits across a reload.
//! Run one area with `cargo test -p jobrelay-lanes --test lanes lane_bound::`.

mod common;
mod memory_store;

mod lane_bound;
mod lane_catch_up;
mod lane_rate_limits;
