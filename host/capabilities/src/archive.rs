//! The `jobrelay:plugin/archive` interface: objects under the plugin's own prefix of one store.
//!
//! The store is a local folder by default or an S3-compatible bucket (`archive:` in the main
//! file), both through the `object_store` crate so the two behave the same: an object is
//! written as a multipart upload and becomes visible only when complete, so a reader never
//! sees half an archive and a writer dropped midway (a trap, a timeout) leaves nothing.
//!
//! Keys are checked before anything is written: relative, `/`-separated, no empty, `.` or
//! `..` segments, no backslashes or control characters. With the prefix in front, no key can
//! reach outside the plugin's part of the store.
//!
//! What a prefix holds is bounded too (`max_total_bytes`): the store counts each prefix's
//! bytes (listed once when a plugin version is loaded, then kept up to date by the writes),
//! and a write reserves its bytes before they are sent, so concurrent calls cannot overshoot
//! together. Replacing an object reserves only what the new one adds to the old one's size (a
//! smaller one gives the difference back once complete); an unfinished writer gives back what
//! it reserved.
//!
//! Its parts, one concept a file: `settings` (the main file's `archive:` section), `store` (the
//! process's store and each prefix's byte count), `keys` (which keys are allowed), `quota`
//! (reserving and giving back a prefix's bytes), `writes` (objects being written), `taped`
//! (archive calls on a tape), `interface` (the calls as plugins make them now) and `v0_1` (the
//! same calls for 0.1.0 plugins). This file keeps what ties them together: the grant and the
//! per-call state.

mod interface;
mod keys;
mod quota;
mod settings;
mod store;
mod taped;
mod v0_1;
mod writes;

use std::sync::Arc;

use object_store::ObjectStore;
use object_store::path::Path as StorePath;
use wasmtime::component::{HasSelf, Linker};

use super::handles::Handles;
use super::refusals::Refusals;
use super::tape::CallTape;
use super::{CallScope, Capability, GrantProblem, LoadScope, StoreSetup};
use serde::{Deserialize, Serialize};

use super::Grants;
use jobrelay_bindings::jobrelay::plugin::archive as wit;
use jobrelay_bindings::v0_1::jobrelay::plugin::archive as older;

use wit::Error as ArchiveError;

pub use self::keys::{KeyError, MAX_KEY_BYTES, check_key};
pub use self::quota::Quota;
pub use self::settings::{ArchiveLocation, ArchiveSettings, S3Settings};
pub use self::store::{ArchiveStore, UsageError};
pub use self::writes::ObjectWriter;

/// Default cap of one object.
pub const DEFAULT_MAX_OBJECT_BYTES: u64 = 1 << 30;
/// Default cap of everything under one plugin's prefix.
pub const DEFAULT_MAX_TOTAL_BYTES: u64 = 10 << 30;
/// Writers one call may hold open at once.
const MAX_OPEN_WRITERS: usize = 16;

/// The archive capability.
pub struct Archive;

impl Capability for Archive {
    fn name(&self) -> &'static str {
        "archive"
    }

    fn prepare(&self, grants: &mut Grants, load: &LoadScope<'_>) -> Result<(), GrantProblem> {
        let Some(grant) = &mut grants.archive else {
            return Ok(());
        };
        if load.services.archive.is_none() {
            return Err("granted, but this host has no archive store".into());
        }
        let prefix = grant
            .prefix
            .clone()
            .unwrap_or_else(|| load.plugin.to_string());
        let prefix = prefix.trim_end_matches('/').to_string();
        check_key(&prefix).map_err(|why| format!("prefix: {why}"))?;
        grant.prefix = Some(prefix);
        Ok(())
    }

    fn configure(&self, call: &CallScope<'_>, setup: &mut StoreSetup) -> Result<(), GrantProblem> {
        let (Some(grant), Some(store)) = (&call.grants.archive, &call.services.archive) else {
            return Ok(());
        };
        let prefix = grant
            .prefix
            .clone()
            .unwrap_or_else(|| call.plugin.to_string());
        let max_total_bytes = grant.max_total_bytes.unwrap_or(DEFAULT_MAX_TOTAL_BYTES);
        setup.state.archive = ArchiveAccess {
            store: Some(store.clone()),
            quota: store.known_usage(&prefix).map(|used| Quota {
                used,
                max: max_total_bytes,
                refusals: call.services.refusals.clone(),
                plugin: Arc::from(call.plugin),
            }),
            refusals: call.services.refusals.clone(),
            plugin: Arc::from(call.plugin),
            prefix,
            max_object_bytes: grant.max_object_bytes.unwrap_or(DEFAULT_MAX_OBJECT_BYTES),
            max_total_bytes,
            writers: Handles::new(MAX_OPEN_WRITERS),
            tape: call.tape(),
        };
        Ok(())
    }
}

/// Archive writes a plugin may make.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArchiveGrant {
    /// The plugin's prefix in the archive store (default: the plugin's name). A relative
    /// `/`-separated path; two plugins should not share one.
    #[serde(default)]
    pub prefix: Option<String>,
    /// Largest object the plugin may write, in bytes (default 1 GiB).
    #[serde(default)]
    pub max_object_bytes: Option<u64>,
    /// The most the plugin's prefix may hold, all objects together, in bytes (default 10 GiB).
    #[serde(default)]
    pub max_total_bytes: Option<u64>,
}

/// The archive state of one call; `store` is `None` unless granted.
#[derive(Default)]
pub struct ArchiveAccess {
    store: Option<ArchiveStore>,
    prefix: String,
    max_object_bytes: u64,
    max_total_bytes: u64,
    refusals: Arc<Refusals>,
    plugin: Arc<str>,
    /// The prefix's byte count, once known: measured by the first write of the process that
    /// needs it (a listing of the prefix), so a store that is down at load fails that write as
    /// "unavailable" rather than the load.
    quota: Option<Quota>,
    /// The writers this call opened and has not dropped: at most [`MAX_OPEN_WRITERS`]. They
    /// end with the call's state, aborting their uploads, so a kept instance
    /// (`instance_reuse`) cannot carry them into its next call and pile up buffered parts.
    writers: Handles<ObjectWriter>,
    /// The run's tape, if calls are recorded or replayed.
    tape: Option<CallTape>,
}

/// Links the interface (both served versions) into a linker whose store data gives the
/// call's [`ArchiveAccess`] through `get`.
pub fn add_to_linker<T: Send + 'static>(
    linker: &mut Linker<T>,
    get: fn(&mut T) -> &mut ArchiveAccess,
) -> wasmtime::Result<()> {
    wit::add_to_linker::<T, HasSelf<ArchiveAccess>>(linker, get)?;
    older::add_to_linker::<T, HasSelf<ArchiveAccess>>(linker, get)
}

impl ArchiveAccess {
    /// The store and the full path of `key`.
    fn locate(&self, key: &str) -> Result<(Arc<dyn ObjectStore>, StorePath), ArchiveError> {
        let store = self.store.as_ref().ok_or_else(|| {
            ArchiveError::InvalidKey(
                "archive writes are not granted to this plugin (grants.archive)".into(),
            )
        })?;
        check_key(key).map_err(|why| ArchiveError::InvalidKey(why.to_string()))?;
        let path = StorePath::parse(format!("{}/{key}", self.prefix))
            .map_err(|e| ArchiveError::InvalidKey(format!("key `{key}`: {e}")))?;
        Ok((store.store.clone(), path))
    }

    /// The prefix's quota, measuring the prefix if this process has not yet.
    async fn quota(&mut self) -> Result<Quota, ArchiveError> {
        if let Some(quota) = &self.quota {
            return Ok(quota.clone());
        }
        let store = self.store.as_ref().ok_or_else(|| {
            ArchiveError::InvalidKey(
                "archive writes are not granted to this plugin (grants.archive)".into(),
            )
        })?;
        let used = store
            .usage(&self.prefix)
            .await
            .map_err(|why| ArchiveError::Unavailable(why.to_string()))?;
        let quota = Quota {
            used,
            max: self.max_total_bytes,
            refusals: self.refusals.clone(),
            plugin: self.plugin.clone(),
        };
        self.quota = Some(quota.clone());
        Ok(quota)
    }

    fn too_large(&self, size: u64) -> ArchiveError {
        ArchiveError::TooLarge(format!(
            "the object would be {size} bytes; the grant allows {} (grants.archive.max_object_bytes)",
            self.max_object_bytes
        ))
    }
}
