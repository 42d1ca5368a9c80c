//! Lanes: one queue per plugin, so a slow or failing plugin never delays another.
//!
//! Within a lane, events of one job are handled one at a time in the order they were observed;
//! different jobs run concurrently up to the plugin's concurrency.

pub mod call_stats;
pub mod cursor_writer;
pub mod dispatcher;
pub mod event_counts;
pub mod finalizer_book;
pub mod handler;
pub mod lane;
pub mod mode;
pub mod queue;
pub mod recent;
pub mod settings;
