//! The `jobrelay:plugin/kv` interface: a small persistent key-value store per plugin.
//!
//! Entries live in the host's state store (the same file as cursors and dead letters), keyed by
//! plugin name, so they survive restarts and reloads and one plugin never reads another's. The
//! size caps keep it what it is for — memory between events such as "this event was already
//! posted" or "the id of the card to update" — and not a database.

use std::sync::Arc;

use wasmtime::component::{HasSelf, Linker};

use super::{CallScope, Capability, StoreSetup};
use crate::runtime::HostState;
use crate::runtime::bindings::jobrelay::plugin::kv as wit;
use crate::state::PluginKv;

/// Longest key, in bytes.
pub const MAX_KEY_BYTES: usize = 512;
/// Largest value, in bytes.
pub const MAX_VALUE_BYTES: usize = 64 << 10;

/// The key-value capability.
pub struct Kv;

impl Capability for Kv {
    fn name(&self) -> &'static str {
        "kv"
    }

    fn add_to_linker(&self, linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
        wit::add_to_linker::<HostState, HasSelf<HostState>>(linker, |state| state)
    }

    fn configure(&self, call: &CallScope<'_>, setup: &mut StoreSetup) -> Result<(), String> {
        if call.grants.kv {
            setup.state.kv = KvAccess {
                store: call.services.kv.clone(),
                plugin: Arc::from(call.plugin),
            };
        }
        Ok(())
    }
}

/// The store one call may use; `store` is `None` unless granted.
#[derive(Default)]
pub struct KvAccess {
    store: Option<Arc<dyn PluginKv>>,
    plugin: Arc<str>,
}

impl KvAccess {
    fn store(&self, key: &str) -> Result<&Arc<dyn PluginKv>, String> {
        let store = self.store.as_ref().ok_or_else(|| {
            "kv is not granted to this plugin (grants.kv), or this host has no state store"
                .to_string()
        })?;
        if key.is_empty() || key.len() > MAX_KEY_BYTES {
            return Err(format!(
                "a key must be 1 to {MAX_KEY_BYTES} bytes, got {}",
                key.len()
            ));
        }
        Ok(store)
    }
}

impl wit::Host for HostState {
    async fn get(&mut self, key: String) -> Result<Option<Vec<u8>>, String> {
        let access = &self.caps.kv;
        let store = access.store(&key)?;
        store
            .kv_get(&access.plugin, &key)
            .await
            .map_err(|e| format!("kv: {e}"))
    }

    async fn set(
        &mut self,
        key: String,
        value: Vec<u8>,
        ttl_seconds: Option<u32>,
    ) -> Result<(), String> {
        let access = &self.caps.kv;
        let store = access.store(&key)?;
        if value.len() > MAX_VALUE_BYTES {
            return Err(format!(
                "a value is at most {MAX_VALUE_BYTES} bytes, got {}",
                value.len()
            ));
        }
        store
            .kv_set(&access.plugin, &key, &value, ttl_seconds)
            .await
            .map_err(|e| format!("kv: {e}"))
    }

    async fn delete(&mut self, key: String) -> Result<bool, String> {
        let access = &self.caps.kv;
        let store = access.store(&key)?;
        store
            .kv_delete(&access.plugin, &key)
            .await
            .map_err(|e| format!("kv: {e}"))
    }
}
