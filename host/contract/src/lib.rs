//! The bottom layer of jobrelay: the vocabulary every other crate speaks.
//!
//! The job event and its phase are what the watchers produce, the lanes order, the state store
//! records and the plugins receive; a secret reference is how any configured value names a
//! secret; tamed text is how anything a plugin says is kept and printed. Nothing here knows Kubernetes, WebAssembly or a database, so every layer above can
//! depend on it and it depends on none of them.

// A layer crate: every public item says what it is for, since the next layer up reads its
// API (the lint is on in each layer crate; see the root Cargo.toml's [workspace.lints]).
#![warn(missing_docs)]

pub mod event;
pub mod event_head;
pub mod fleet;
pub mod label_selector;
pub mod object_name;
pub mod secret;
pub mod story;
pub mod text;
pub mod transition_key;
pub mod uid;
pub mod uid_map;
