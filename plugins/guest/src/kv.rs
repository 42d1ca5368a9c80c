//! The plugin's key-value store (`grants.kv`): the raw interface, and JSON values on top.
//!
//! Entries survive restarts and reloads, and only this plugin sees them; they are small
//! memories between events ("this transition was already posted"), not a database. Limits
//! and the quota are in `docs/capabilities.md`.

pub use crate::bindings::jobrelay::plugin::kv::*;

use serde::Serialize;
use serde::de::DeserializeOwned;

/// The value under `key` read as JSON into `T`; `None` if there is none.
pub fn get_json<T: DeserializeOwned>(key: &str) -> Result<Option<T>, String> {
    match get(key)? {
        None => Ok(None),
        Some(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| format!("kv `{key}`: not the JSON expected: {e}")),
    }
}

/// Keeps `value` as JSON under `key`, for `ttl_seconds` if given.
pub fn set_json<T: Serialize>(
    key: &str,
    value: &T,
    ttl_seconds: Option<u32>,
) -> Result<(), String> {
    let bytes = serde_json::to_vec(value).map_err(|e| format!("kv `{key}`: {e}"))?;
    set(key, &bytes, ttl_seconds)
}
