//! The `jobrelay:plugin/kv` interface: a small persistent key-value store per plugin.
//!
//! Entries live in the host's state store (the same file as cursors and dead letters), keyed by
//! plugin name, so they survive restarts and reloads and one plugin never reads another's. The
//! size caps and the per-plugin quota (`grants.kv_quota`) keep it what it is for — memory
//! between events such as "this event was already posted" or "the id of the card to update" —
//! and not a database, and keep one plugin from filling the file the cursors live in.

use std::sync::Arc;

use wasmtime::component::{HasSelf, Linker};

use super::refusals::{Limit, Refusals};
use serde::{Deserialize, Serialize};

use super::tape::{self, CallTape};
use super::{CallScope, Capability, GrantProblem, StoreSetup};
use jobrelay_bindings::jobrelay::plugin::kv as wit;
use jobrelay_bindings::v0_1::jobrelay::plugin::kv as older;
use jobrelay_state::PluginKv;
use serde_json::json;

/// Longest key, in bytes.
pub const MAX_KEY_BYTES: usize = 512;
/// Largest value, in bytes.
pub const MAX_VALUE_BYTES: usize = 64 << 10;
/// Live entries a plugin may keep, when `grants.kv_quota` sets no number.
pub const DEFAULT_MAX_ENTRIES: u64 = 10_000;
/// Bytes of keys and values a plugin may keep, when `grants.kv_quota` sets no number.
pub const DEFAULT_MAX_BYTES: u64 = 64 << 20;

/// The most a plugin may keep in its key-value store: live entries, and their keys' and
/// values' bytes together.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KvQuota {
    /// Live entries; default [`DEFAULT_MAX_ENTRIES`].
    #[serde(default)]
    pub max_entries: Option<u64>,
    /// Bytes of keys and values together; default [`DEFAULT_MAX_BYTES`].
    #[serde(default)]
    pub max_bytes: Option<u64>,
}

/// The key-value capability.
pub struct Kv;

impl Capability for Kv {
    fn name(&self) -> &'static str {
        "kv"
    }

    fn configure(&self, call: &CallScope<'_>, setup: &mut StoreSetup) -> Result<(), GrantProblem> {
        if call.grants.kv {
            let quota = call.grants.kv_quota.clone().unwrap_or_default();
            setup.state.kv = KvAccess {
                refusals: call.services.refusals.clone(),
                store: call.services.kv.clone(),
                plugin: Arc::from(call.plugin),
                max_entries: quota.max_entries.unwrap_or(DEFAULT_MAX_ENTRIES),
                max_bytes: quota.max_bytes.unwrap_or(DEFAULT_MAX_BYTES),
                tape: call.tape(),
            };
        }
        Ok(())
    }
}

/// The store one call may use; `store` is `None` unless granted.
#[derive(Default)]
pub struct KvAccess {
    refusals: Arc<Refusals>,
    store: Option<Arc<dyn PluginKv>>,
    plugin: Arc<str>,
    max_entries: u64,
    max_bytes: u64,
    /// The run's tape, if calls are recorded or replayed.
    tape: Option<CallTape>,
}

/// Why a key-value call is refused before it reaches the store; the plugin receives the text.
#[derive(Debug, thiserror::Error)]
enum KvRefusal {
    #[error("kv is not granted to this plugin (grants.kv), or this host has no state store")]
    NotGranted,
    #[error("a key must be 1 to {MAX_KEY_BYTES} bytes, got {0}")]
    KeySize(usize),
}

impl KvAccess {
    fn store(&self, key: &str) -> Result<&Arc<dyn PluginKv>, KvRefusal> {
        let store = self.store.as_ref().ok_or(KvRefusal::NotGranted)?;
        if key.is_empty() || key.len() > MAX_KEY_BYTES {
            return Err(KvRefusal::KeySize(key.len()));
        }
        Ok(store)
    }
}

/// Links the interface (both served versions) into a linker whose store data gives the
/// call's [`KvAccess`] through `get`.
pub fn add_to_linker<T: Send + 'static>(
    linker: &mut Linker<T>,
    get: fn(&mut T) -> &mut KvAccess,
) -> wasmtime::Result<()> {
    wit::add_to_linker::<T, HasSelf<KvAccess>>(linker, get)?;
    older::add_to_linker::<T, HasSelf<KvAccess>>(linker, get)
}

impl wit::Host for KvAccess {
    async fn get(&mut self, key: String) -> Result<Option<Vec<u8>>, String> {
        let access = &*self;
        let store = access.store(&key).map_err(|e| e.to_string())?;
        let real = async {
            store
                .kv_get(&access.plugin, &key)
                .await
                .map_err(|e| format!("kv: {e}"))
        };
        tape::through(
            access.tape.as_ref(),
            "kv.get",
            || json!({ "key": key }),
            real,
        )
        .await
    }

    async fn set(
        &mut self,
        key: String,
        value: Vec<u8>,
        ttl_seconds: Option<u32>,
    ) -> Result<(), String> {
        let access = &*self;
        let store = access.store(&key).map_err(|e| e.to_string())?;
        if value.len() > MAX_VALUE_BYTES {
            return Err(format!(
                "a value is at most {MAX_VALUE_BYTES} bytes, got {}",
                value.len()
            ));
        }
        let real = async {
            // The quota is checked before the write, not in the same transaction: writes
            // racing from the plugin's concurrent calls may overshoot it by at most one entry
            // each.
            let (entries, bytes) = store
                .kv_usage(&access.plugin, &key)
                .await
                .map_err(|e| format!("kv: {e}"))?;
            let after = bytes + (key.len() + value.len()) as u64;
            if entries + 1 > access.max_entries || after > access.max_bytes {
                access.refusals.count(&access.plugin, Limit::KvQuota);
                return Err(format!(
                    "kv quota: the plugin keeps {entries} other entries of {bytes} bytes; this \
                     write would make {} entries of {after} bytes, over the quota of {} entries \
                     and {} bytes (grants.kv_quota); delete entries or let them expire",
                    entries + 1,
                    access.max_entries,
                    access.max_bytes
                ));
            }
            store
                .kv_set(&access.plugin, &key, &value, ttl_seconds)
                .await
                .map_err(|e| format!("kv: {e}"))
        };
        let args = || {
            json!({
                "key": key,
                "value": tape::bytes_to_tape(&value),
                "ttl_seconds": ttl_seconds,
            })
        };
        tape::through(access.tape.as_ref(), "kv.set", args, real).await
    }

    async fn delete(&mut self, key: String) -> Result<bool, String> {
        let access = &*self;
        let store = access.store(&key).map_err(|e| e.to_string())?;
        let real = async {
            store
                .kv_delete(&access.plugin, &key)
                .await
                .map_err(|e| format!("kv: {e}"))
        };
        tape::through(
            access.tape.as_ref(),
            "kv.delete",
            || json!({ "key": key }),
            real,
        )
        .await
    }
}

impl older::Host for KvAccess {
    async fn get(&mut self, key: String) -> Result<Option<Vec<u8>>, String> {
        wit::Host::get(self, key).await
    }

    async fn set(
        &mut self,
        key: String,
        value: Vec<u8>,
        ttl_seconds: Option<u32>,
    ) -> Result<(), String> {
        wit::Host::set(self, key, value, ttl_seconds).await
    }

    async fn delete(&mut self, key: String) -> Result<bool, String> {
        wit::Host::delete(self, key).await
    }
}
