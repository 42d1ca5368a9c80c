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

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use object_store::path::Path as StorePath;
use object_store::{MultipartUpload, ObjectStore, PutPayload};
use wasmtime::component::{HasSelf, Linker, Resource};

use super::handles::Handles;
use super::open_error::OpenError;
use super::refusals::{Limit, Refusals};
use super::tape::{self, CallTape, FromDivergence, Taped};
use super::{CallScope, Capability, GrantProblem, LoadScope, StoreSetup};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::Grants;
use jobrelay_bindings::jobrelay::plugin::archive as wit;
use jobrelay_bindings::v0_1::jobrelay::plugin::archive as older;
use jobrelay_contract::secret;

use wit::{Error as ArchiveError, Writer};

/// The `archive:` section: one store for every plugin, each writing under its own prefix.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArchiveSettings {
    /// A local folder (relative: to the config folder). Default: `archive/` next to the
    /// state file (with the state in MySQL: `/var/lib/jobrelay/archive`).
    #[serde(default)]
    pub local: Option<PathBuf>,
    /// An S3-compatible bucket instead of a local folder.
    #[serde(default)]
    pub s3: Option<S3Settings>,
}

/// An S3-compatible object store.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct S3Settings {
    pub bucket: String,
    #[serde(default)]
    pub region: Option<String>,
    /// Endpoint for non-AWS stores (MinIO, Ceph), e.g. `http://minio:9000`.
    #[serde(default)]
    pub endpoint: Option<String>,
    /// Key id and secret; secret references (`env:NAME`, `file:/path`) are the expected form.
    #[serde(default)]
    pub access_key_id: Option<String>,
    #[serde(default)]
    pub secret_access_key: Option<String>,
    /// Allow a plain-HTTP endpoint.
    #[serde(default)]
    pub allow_http: bool,
}

impl std::fmt::Debug for S3Settings {
    /// Never prints the credentials.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Settings")
            .field("bucket", &self.bucket)
            .field("region", &self.region)
            .field("endpoint", &self.endpoint)
            .field("allow_http", &self.allow_http)
            .finish_non_exhaustive()
    }
}

/// Where the archive lives, after validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArchiveLocation {
    /// A local folder, absolute.
    Local(PathBuf),
    S3(S3Settings),
}

/// Default cap of one object.
pub const DEFAULT_MAX_OBJECT_BYTES: u64 = 1 << 30;
/// Default cap of everything under one plugin's prefix.
pub const DEFAULT_MAX_TOTAL_BYTES: u64 = 10 << 30;
/// Longest key, in bytes.
pub const MAX_KEY_BYTES: usize = 1024;
/// Bytes buffered before a part is uploaded: S3's minimum part size.
const PART_BYTES: usize = 5 << 20;
/// Writers one call may hold open at once.
const MAX_OPEN_WRITERS: usize = 16;

/// The archive capability.
pub struct Archive;

/// The process's archive store.
#[derive(Clone)]
pub struct ArchiveStore {
    store: Arc<dyn ObjectStore>,
    description: String,
    /// Writers alive now, all plugins together (each holds up to a part in memory).
    open_writers: Arc<std::sync::atomic::AtomicUsize>,
    /// Bytes held under each prefix, objects being written included (reserved).
    usage: Arc<std::sync::Mutex<HashMap<String, Arc<AtomicU64>>>>,
}

impl std::fmt::Debug for ArchiveStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.description)
    }
}

impl ArchiveStore {
    /// Opens the store the main file describes; a local folder is created if missing.
    pub fn open(location: &ArchiveLocation) -> Result<ArchiveStore, OpenError> {
        match location {
            ArchiveLocation::Local(root) => {
                std::fs::create_dir_all(root).map_err(|source| OpenError::ArchiveFolder {
                    path: root.clone(),
                    source,
                })?;
                let store = object_store::local::LocalFileSystem::new_with_prefix(root).map_err(
                    |source| OpenError::ArchiveLocal {
                        path: root.clone(),
                        source,
                    },
                )?;
                Ok(ArchiveStore {
                    store: Arc::new(store),
                    description: format!("local folder {}", root.display()),
                    open_writers: Arc::default(),
                    usage: Arc::default(),
                })
            }
            ArchiveLocation::S3(s3) => {
                let builder = s3_builder(s3)?;
                let store = builder
                    .build()
                    .map_err(|source| OpenError::ArchiveS3 { source })?;
                Ok(ArchiveStore {
                    store: Arc::new(store),
                    description: format!("s3 bucket {}", s3.bucket),
                    open_writers: Arc::default(),
                    usage: Arc::default(),
                })
            }
        }
    }

    /// Writers open now, across all plugins and calls: each may hold up to a part (5 MiB) in
    /// memory until it is finished or dropped.
    pub fn open_writers(&self) -> usize {
        self.open_writers.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The byte count of `prefix`, listed from the store the first time it is asked for.
    pub async fn usage(&self, prefix: &str) -> Result<Arc<AtomicU64>, String> {
        if let Some(known) = self.known_usage(prefix) {
            return Ok(known);
        }
        let path = StorePath::parse(prefix).map_err(|e| format!("prefix `{prefix}`: {e}"))?;
        let mut listed = self.store.list(Some(&path));
        let mut bytes = 0u64;
        while let Some(meta) = futures::StreamExt::next(&mut listed).await {
            let meta = meta.map_err(|e| format!("listing `{prefix}`: {e}"))?;
            bytes += meta.size;
        }
        let mut usage = self.usage.lock().unwrap_or_else(|p| p.into_inner());
        Ok(usage
            .entry(prefix.to_string())
            .or_insert_with(|| Arc::new(AtomicU64::new(bytes)))
            .clone())
    }

    /// The byte count of `prefix` if it was listed already.
    fn known_usage(&self, prefix: &str) -> Option<Arc<AtomicU64>> {
        let usage = self.usage.lock().unwrap_or_else(|p| p.into_inner());
        usage.get(prefix).cloned()
    }
}

/// The bytes one prefix may hold and holds: reservations are made before bytes are sent.
#[derive(Clone)]
pub struct Quota {
    used: Arc<AtomicU64>,
    max: u64,
    /// Where a refusal is counted, under the plugin's name.
    refusals: Arc<Refusals>,
    plugin: Arc<str>,
}

impl Quota {
    /// Reserves `bytes`, or says why not.
    fn reserve(&self, bytes: u64) -> Result<(), ArchiveError> {
        let reserved = self
            .used
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |used| {
                used.checked_add(bytes).filter(|total| *total <= self.max)
            });
        reserved.map(|_| ()).map_err(|used| {
            self.refusals.count(&self.plugin, Limit::ArchiveQuota);
            ArchiveError::TooLarge(format!(
                "the plugin's archive holds {used} bytes; {bytes} more would pass the {} its \
                 grant allows in total (grants.archive.max_total_bytes)",
                self.max
            ))
        })
    }

    /// Gives back `bytes` (an abandoned write, a replaced object).
    fn release(&self, bytes: u64) {
        let _ = self
            .used
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |used| {
                Some(used.saturating_sub(bytes))
            });
    }
}

/// The size of the object at `path` now, 0 if there is none.
async fn current_size(store: &dyn ObjectStore, path: &StorePath) -> Result<u64, ArchiveError> {
    match store.head(path).await {
        Ok(meta) => Ok(meta.size),
        Err(object_store::Error::NotFound { .. }) => Ok(0),
        Err(e) => Err(store_failed(&format!("reading `{path}`"), e)),
    }
}

/// Checks a relative key: `a/b/c.log.gz`.
pub fn check_key(key: &str) -> Result<(), String> {
    if key.is_empty() || key.len() > MAX_KEY_BYTES {
        return Err(format!(
            "a key must be 1 to {MAX_KEY_BYTES} bytes, got {}",
            key.len()
        ));
    }
    if key.starts_with('/') {
        return Err(format!(
            "key `{key}` is absolute; keys are relative to the plugin's prefix"
        ));
    }
    if key.contains('\\') || key.chars().any(char::is_control) {
        return Err(format!(
            "key `{}` contains a backslash or a control character",
            key.escape_debug()
        ));
    }
    for segment in key.split('/') {
        if segment.is_empty() || segment == "." || segment == ".." {
            return Err(format!(
                "key `{key}` has an empty, `.` or `..` segment; it must stay under the prefix"
            ));
        }
    }
    Ok(())
}

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
        check_key(key).map_err(ArchiveError::InvalidKey)?;
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
            .map_err(ArchiveError::Unavailable)?;
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

fn store_failed(what: &str, error: object_store::Error) -> ArchiveError {
    ArchiveError::Unavailable(format!("{what}: {error}"))
}

/// An object being written. Parts are uploaded as they fill, so at most one part is buffered.
pub struct ObjectWriter {
    upload: Option<Box<dyn MultipartUpload>>,
    buffer: Vec<u8>,
    written: u64,
    max_bytes: u64,
    key: String,
    /// The store's count of open writers, decremented on drop.
    open: Arc<std::sync::atomic::AtomicUsize>,
    /// The prefix's quota, where `reserved` bytes are held for this writer: what it has
    /// written beyond the size of the object it replaces (`replaces`). Kept when the object
    /// completes, given back if it does not.
    quota: Quota,
    replaces: u64,
    reserved: u64,
}

impl ObjectWriter {
    async fn flush_part(&mut self) -> Result<(), ArchiveError> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let upload = self
            .upload
            .as_mut()
            .ok_or_else(|| ArchiveError::InvalidKey("the writer is already finished".into()))?;
        let part = PutPayload::from(std::mem::take(&mut self.buffer));
        upload
            .put_part(part)
            .await
            .map_err(|e| store_failed(&format!("writing `{}`", self.key), e))
    }
}

impl Drop for ObjectWriter {
    /// An unfinished upload is aborted so the store keeps no orphaned parts.
    fn drop(&mut self) {
        self.open.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        if self.upload.is_some() {
            self.quota.release(self.reserved);
        }
        if let Some(mut upload) = self.upload.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(async move {
                let _ = upload.abort().await;
            });
        }
    }
}

impl ArchiveAccess {
    async fn create_writer(&mut self, key: String) -> Result<ObjectWriter, ArchiveError> {
        let quota = self.quota().await?;
        let (store, path) = self.locate(&key)?;
        let counter = self
            .store
            .as_ref()
            .map(|s| s.open_writers.clone())
            .unwrap_or_default();
        let replaces = current_size(store.as_ref(), &path).await?;
        let upload = store
            .put_multipart(&path)
            .await
            .map_err(|e| store_failed(&format!("creating `{key}`"), e))?;
        counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(ObjectWriter {
            upload: Some(upload),
            buffer: Vec::new(),
            written: 0,
            max_bytes: self.max_object_bytes,
            key,
            open: counter,
            quota,
            replaces,
            reserved: 0,
        })
    }

    async fn put_object(
        &mut self,
        key: &str,
        path: StorePath,
        bytes: Vec<u8>,
    ) -> Result<(), ArchiveError> {
        let quota = self.quota().await?;
        let store = self
            .store
            .as_ref()
            .map(|s| s.store.clone())
            .ok_or_else(|| ArchiveError::InvalidKey("archive writes are not granted".into()))?;
        let size = bytes.len() as u64;
        let replaces = current_size(store.as_ref(), &path).await?;
        let added = size.saturating_sub(replaces);
        quota.reserve(added)?;
        match store.put(&path, PutPayload::from(bytes)).await {
            Ok(_) => {
                quota.release(replaces.saturating_sub(size));
                Ok(())
            }
            Err(e) => {
                quota.release(added);
                Err(store_failed(&format!("writing `{key}`"), e))
            }
        }
    }
}

impl ObjectWriter {
    /// What stands for a writer in a replay: the tape answers its writes, so it holds and
    /// uploads nothing.
    fn replayed(key: String, plugin: Arc<str>) -> ObjectWriter {
        ObjectWriter {
            upload: None,
            buffer: Vec::new(),
            written: 0,
            max_bytes: 0,
            key,
            // Its own count, which its drop takes back to zero.
            open: Arc::new(std::sync::atomic::AtomicUsize::new(1)),
            quota: Quota {
                used: Arc::default(),
                max: u64::MAX,
                refusals: Arc::default(),
                plugin,
            },
            replaces: 0,
            reserved: 0,
        }
    }

    async fn write(&mut self, bytes: Vec<u8>) -> Result<(), ArchiveError> {
        if self.upload.is_none() {
            return Err(ArchiveError::InvalidKey(
                "the writer is already finished".into(),
            ));
        }
        let size = self.written + bytes.len() as u64;
        if size > self.max_bytes {
            return Err(ArchiveError::TooLarge(format!(
                "`{}` would be {size} bytes; the grant allows {} (grants.archive.max_object_bytes)",
                self.key, self.max_bytes
            )));
        }
        let needed = size.saturating_sub(self.replaces);
        self.quota.reserve(needed - self.reserved)?;
        self.reserved = needed;
        self.written = size;
        self.buffer.extend_from_slice(&bytes);
        if self.buffer.len() >= PART_BYTES {
            self.flush_part().await?;
        }
        Ok(())
    }

    async fn finish(&mut self) -> Result<u64, ArchiveError> {
        // An empty object still needs one (empty) part on most stores.
        let empty = self.written == 0;
        if empty {
            self.buffer = Vec::new();
            let upload = self
                .upload
                .as_mut()
                .ok_or_else(|| ArchiveError::InvalidKey("the writer is already finished".into()))?;
            upload
                .put_part(PutPayload::default())
                .await
                .map_err(|e| store_failed(&format!("writing `{}`", self.key), e))?;
        } else {
            self.flush_part().await?;
        }
        let mut upload = self
            .upload
            .take()
            .ok_or_else(|| ArchiveError::InvalidKey("the writer is already finished".into()))?;
        let completed = upload
            .complete()
            .await
            .map_err(|e| store_failed(&format!("completing `{}`", self.key), e));
        // Done with the upload either way: what it reserved is kept if the object exists now
        // (and the one it replaced gives its size back), given back if not.
        match completed {
            Ok(_) => {
                self.quota
                    .release(self.replaces.saturating_sub(self.written));
                Ok(self.written)
            }
            Err(e) => {
                self.quota.release(self.reserved);
                Err(e)
            }
        }
    }
}

impl wit::Host for ArchiveAccess {
    async fn create(&mut self, key: String) -> Result<Resource<Writer>, ArchiveError> {
        self.locate(&key)?;
        if self.writers.len() >= MAX_OPEN_WRITERS {
            return Err(ArchiveError::Unavailable(format!(
                "at most {MAX_OPEN_WRITERS} writers may be open at once; finish one first"
            )));
        }
        let tape = self.tape.clone();
        let args = || json!({ "key": key });
        let writer = match &tape {
            Some(tape) if tape.replaying() => {
                let created: Result<(), ArchiveError> = tape.replay("archive.create", args());
                created.map(|()| ObjectWriter::replayed(key.clone(), self.plugin.clone()))
            }
            _ => {
                let writer = self.create_writer(key.clone()).await;
                if let Some(tape) = &tape {
                    let answer = writer.as_ref().map(|_| ()).map_err(Clone::clone);
                    tape.record("archive.create", args(), &answer);
                }
                writer
            }
        }?;
        self.writers
            .push(writer)
            .map_err(|e| ArchiveError::Unavailable(format!("cannot open another writer: {e}")))
    }

    async fn put(&mut self, key: String, bytes: Vec<u8>) -> Result<(), ArchiveError> {
        let (_, path) = self.locate(&key)?;
        let size = bytes.len() as u64;
        if size > self.max_object_bytes {
            return Err(self.too_large(size));
        }
        let tape = self.tape.clone();
        let args = tape
            .as_ref()
            .map(|_| json!({ "key": key, "bytes": tape::bytes_to_tape(&bytes) }));
        let real = self.put_object(&key, path, bytes);
        tape::through(
            tape.as_ref(),
            "archive.put",
            || args.unwrap_or_default(),
            real,
        )
        .await
    }
}

impl wit::HostWriter for ArchiveAccess {
    async fn write(
        &mut self,
        writer: Resource<Writer>,
        bytes: Vec<u8>,
    ) -> Result<(), ArchiveError> {
        let rep = writer.rep();
        let writer = self
            .writers
            .get_mut(&writer)
            .map_err(|e| ArchiveError::InvalidKey(format!("invalid writer handle: {e}")))?;
        let args = self
            .tape
            .as_ref()
            .map(|_| json!({ "writer": rep, "bytes": tape::bytes_to_tape(&bytes) }));
        let real = writer.write(bytes);
        tape::through(
            self.tape.as_ref(),
            "archive.write",
            || args.unwrap_or_default(),
            real,
        )
        .await
    }

    async fn finish(&mut self, writer: Resource<Writer>) -> Result<u64, ArchiveError> {
        let rep = writer.rep();
        let writer = self
            .writers
            .get_mut(&writer)
            .map_err(|e| ArchiveError::InvalidKey(format!("invalid writer handle: {e}")))?;
        let args = || json!({ "writer": rep });
        tape::through(self.tape.as_ref(), "archive.finish", args, writer.finish()).await
    }

    async fn drop(&mut self, writer: Resource<Writer>) -> wasmtime::Result<()> {
        self.writers.remove(writer)?;
        Ok(())
    }
}

/// `{"invalid-key": "..."}`, `{"too-large": "..."}` or `{"unavailable": "..."}`.
impl Taped for ArchiveError {
    fn to_tape(&self) -> serde_json::Value {
        match self {
            ArchiveError::InvalidKey(m) => tape::case_to_tape("invalid-key", m),
            ArchiveError::TooLarge(m) => tape::case_to_tape("too-large", m),
            ArchiveError::Unavailable(m) => tape::case_to_tape("unavailable", m),
        }
    }

    fn from_tape(value: &serde_json::Value) -> Result<ArchiveError, String> {
        match tape::case_from_tape(value)? {
            ("invalid-key", m) => Ok(ArchiveError::InvalidKey(m.into())),
            ("too-large", m) => Ok(ArchiveError::TooLarge(m.into())),
            ("unavailable", m) => Ok(ArchiveError::Unavailable(m.into())),
            (other, _) => Err(format!("`{other}` is not an archive error")),
        }
    }
}

impl FromDivergence for ArchiveError {
    fn from_divergence(reason: String) -> ArchiveError {
        ArchiveError::Unavailable(reason)
    }
}

impl older::Host for ArchiveAccess {
    async fn create(&mut self, key: String) -> Result<Resource<older::Writer>, older::Error> {
        wit::Host::create(self, key)
            .await
            .map(|writer| Resource::new_own(writer.rep()))
            .map_err(Into::into)
    }

    async fn put(&mut self, key: String, bytes: Vec<u8>) -> Result<(), older::Error> {
        wit::Host::put(self, key, bytes).await.map_err(Into::into)
    }
}

impl older::HostWriter for ArchiveAccess {
    async fn write(
        &mut self,
        writer: Resource<older::Writer>,
        bytes: Vec<u8>,
    ) -> Result<(), older::Error> {
        let writer = Resource::new_borrow(writer.rep());
        wit::HostWriter::write(self, writer, bytes)
            .await
            .map_err(Into::into)
    }

    async fn finish(&mut self, writer: Resource<older::Writer>) -> Result<u64, older::Error> {
        let writer = Resource::new_borrow(writer.rep());
        wit::HostWriter::finish(self, writer)
            .await
            .map_err(Into::into)
    }

    async fn drop(&mut self, writer: Resource<older::Writer>) -> wasmtime::Result<()> {
        wit::HostWriter::drop(self, Resource::new_own(writer.rep())).await
    }
}

/// The S3 client's settings: the environment's standard AWS settings first (`AWS_*`: keys and
/// session token, region, web identity for IRSA, container credentials for EKS Pod Identity
/// and ECS; without any, the instance's metadata service), then what the main file sets, which
/// wins. So a pod with a role needs no keys in the config at all.
fn s3_builder(s3: &S3Settings) -> Result<object_store::aws::AmazonS3Builder, OpenError> {
    let mut builder = object_store::aws::AmazonS3Builder::from_env()
        .with_bucket_name(&s3.bucket)
        .with_allow_http(s3.allow_http);
    if let Some(region) = &s3.region {
        builder = builder.with_region(region);
    }
    if let Some(endpoint) = &s3.endpoint {
        builder = builder.with_endpoint(endpoint);
    }
    if let Some(id) = &s3.access_key_id {
        let id = secret::resolve(id).map_err(|source| OpenError::ArchiveSecret {
            field: "access_key_id",
            source,
        })?;
        builder = builder.with_access_key_id(id);
    }
    if let Some(key) = &s3.secret_access_key {
        let key = secret::resolve(key).map_err(|source| OpenError::ArchiveSecret {
            field: "secret_access_key",
            source,
        })?;
        builder = builder.with_secret_access_key(key);
    }
    Ok(builder)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_stay_under_the_prefix() {
        assert!(check_key("east/ml/uid/pod/container.log.gz").is_ok());
        assert!(check_key("manifest.json").is_ok());
        for bad in [
            "",
            "/etc/passwd",
            "../x",
            "a/../../x",
            "a//b",
            "a/./b",
            "a\\b",
            "a\nb",
            "a/",
        ] {
            assert!(check_key(bad).is_err(), "{bad:?} must be refused");
        }
        assert!(check_key(&"k".repeat(MAX_KEY_BYTES + 1)).is_err());
    }

    /// The standard AWS environment reaches the S3 client (here EKS Pod Identity's container
    /// credentials and a region), and what the main file sets wins over it.
    #[test]
    fn s3_takes_the_standard_aws_environment_and_the_config_wins() {
        use object_store::aws::AmazonS3ConfigKey as Key;
        // SAFETY: no other test in this crate reads or writes the environment.
        unsafe {
            std::env::set_var(
                "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                "http://169.254.170.23/v1",
            );
            std::env::set_var("AWS_DEFAULT_REGION", "eu-north-1");
            std::env::set_var("AWS_ACCESS_KEY_ID", "from-environment");
        }
        let mut s3 = S3Settings {
            bucket: "logs".into(),
            region: None,
            endpoint: None,
            access_key_id: None,
            secret_access_key: None,
            allow_http: false,
        };
        let builder = s3_builder(&s3).expect("builder");
        assert_eq!(
            builder
                .get_config_value(&Key::ContainerCredentialsFullUri)
                .as_deref(),
            Some("http://169.254.170.23/v1")
        );
        assert_eq!(
            builder.get_config_value(&Key::Region).as_deref(),
            Some("eu-north-1")
        );
        s3.region = Some("us-east-2".into());
        s3.access_key_id = Some("from-config".into());
        let builder = s3_builder(&s3).expect("builder");
        assert_eq!(
            builder.get_config_value(&Key::Region).as_deref(),
            Some("us-east-2")
        );
        assert_eq!(
            builder.get_config_value(&Key::AccessKeyId).as_deref(),
            Some("from-config")
        );
    }
}
