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

use std::sync::Arc;

use object_store::path::Path as StorePath;
use object_store::{MultipartUpload, ObjectStore, PutPayload};
use wasmtime::component::{HasSelf, Linker, Resource};

use super::{CallScope, Capability, LoadScope, StoreSetup};
use crate::config::main_file::ArchiveLocation;
use crate::config::manifest::Grants;
use crate::config::secret;
use crate::runtime::HostState;
use crate::runtime::bindings::jobrelay::plugin::archive as wit;

use wit::Error as ArchiveError;

/// Default cap of one object.
pub const DEFAULT_MAX_OBJECT_BYTES: u64 = 1 << 30;
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
}

impl std::fmt::Debug for ArchiveStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.description)
    }
}

impl ArchiveStore {
    /// Opens the store the main file describes; a local folder is created if missing.
    pub fn open(location: &ArchiveLocation) -> Result<ArchiveStore, String> {
        match location {
            ArchiveLocation::Local(root) => {
                std::fs::create_dir_all(root).map_err(|e| {
                    format!("archive.local: cannot create `{}`: {e}", root.display())
                })?;
                let store = object_store::local::LocalFileSystem::new_with_prefix(root)
                    .map_err(|e| format!("archive.local: `{}`: {e}", root.display()))?;
                Ok(ArchiveStore {
                    store: Arc::new(store),
                    description: format!("local folder {}", root.display()),
                    open_writers: Arc::default(),
                })
            }
            ArchiveLocation::S3(s3) => {
                let mut builder = object_store::aws::AmazonS3Builder::new()
                    .with_bucket_name(&s3.bucket)
                    .with_allow_http(s3.allow_http);
                if let Some(region) = &s3.region {
                    builder = builder.with_region(region);
                }
                if let Some(endpoint) = &s3.endpoint {
                    builder = builder.with_endpoint(endpoint);
                }
                if let Some(id) = &s3.access_key_id {
                    let id = secret::resolve(id)
                        .map_err(|e| format!("archive.s3.access_key_id: {e}"))?;
                    builder = builder.with_access_key_id(id);
                }
                if let Some(key) = &s3.secret_access_key {
                    let key = secret::resolve(key)
                        .map_err(|e| format!("archive.s3.secret_access_key: {e}"))?;
                    builder = builder.with_secret_access_key(key);
                }
                let store = builder.build().map_err(|e| format!("archive.s3: {e}"))?;
                Ok(ArchiveStore {
                    store: Arc::new(store),
                    description: format!("s3 bucket {}", s3.bucket),
                    open_writers: Arc::default(),
                })
            }
        }
    }

    /// Writers open now, across all plugins and calls: each may hold up to a part (5 MiB) in
    /// memory until it is finished or dropped.
    pub fn open_writers(&self) -> usize {
        self.open_writers.load(std::sync::atomic::Ordering::SeqCst)
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

    fn add_to_linker(&self, linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
        wit::add_to_linker::<HostState, HasSelf<HostState>>(linker, |state| state)
    }

    fn prepare(&self, grants: &mut Grants, load: &LoadScope<'_>) -> Result<(), String> {
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

    fn configure(&self, call: &CallScope<'_>, setup: &mut StoreSetup) -> Result<(), String> {
        let (Some(grant), Some(store)) = (&call.grants.archive, &call.services.archive) else {
            return Ok(());
        };
        setup.state.archive = ArchiveAccess {
            store: Some(store.clone()),
            prefix: grant
                .prefix
                .clone()
                .unwrap_or_else(|| call.plugin.to_string()),
            max_object_bytes: grant.max_object_bytes.unwrap_or(DEFAULT_MAX_OBJECT_BYTES),
            open: Vec::new(),
        };
        Ok(())
    }
}

/// The archive state of one call; `store` is `None` unless granted.
#[derive(Default)]
pub struct ArchiveAccess {
    store: Option<ArchiveStore>,
    prefix: String,
    max_object_bytes: u64,
    /// The writers this call opened and has not dropped (resource handles in the store's
    /// table): at most [`MAX_OPEN_WRITERS`], and all dropped when the call ends.
    open: Vec<u32>,
}

impl ArchiveAccess {
    /// Drops every writer the call left open, aborting its upload. A kept instance
    /// (`instance_reuse`) would otherwise carry them into its next call, each with a part
    /// buffered, and a plugin could pile up memory call after call.
    pub fn close_all(&mut self, table: &mut wasmtime::component::ResourceTable) {
        for rep in self.open.drain(..) {
            let _ = table.delete(Resource::<ObjectWriter>::new_own(rep));
        }
    }

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
        if let Some(mut upload) = self.upload.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(async move {
                let _ = upload.abort().await;
            });
        }
    }
}

impl wit::Host for HostState {
    async fn create(&mut self, key: String) -> Result<Resource<ObjectWriter>, ArchiveError> {
        let access = &self.caps.archive;
        let (store, path) = access.locate(&key)?;
        let counter = access
            .store
            .as_ref()
            .map(|s| s.open_writers.clone())
            .unwrap_or_default();
        if access.open.len() >= MAX_OPEN_WRITERS {
            return Err(ArchiveError::Unavailable(format!(
                "at most {MAX_OPEN_WRITERS} writers may be open at once; finish one first"
            )));
        }
        let upload = store
            .put_multipart(&path)
            .await
            .map_err(|e| store_failed(&format!("creating `{key}`"), e))?;
        let writer = ObjectWriter {
            upload: Some(upload),
            buffer: Vec::new(),
            written: 0,
            max_bytes: access.max_object_bytes,
            key,
            open: counter,
        };
        writer
            .open
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let handle = self
            .table()
            .push(writer)
            .map_err(|e| ArchiveError::Unavailable(format!("cannot open another writer: {e}")))?;
        self.caps.archive.open.push(handle.rep());
        Ok(handle)
    }

    async fn put(&mut self, key: String, bytes: Vec<u8>) -> Result<(), ArchiveError> {
        let access = &self.caps.archive;
        let (store, path) = access.locate(&key)?;
        if bytes.len() as u64 > access.max_object_bytes {
            return Err(access.too_large(bytes.len() as u64));
        }
        store
            .put(&path, PutPayload::from(bytes))
            .await
            .map_err(|e| store_failed(&format!("writing `{key}`"), e))?;
        Ok(())
    }
}

impl wit::HostWriter for HostState {
    async fn write(
        &mut self,
        writer: Resource<ObjectWriter>,
        bytes: Vec<u8>,
    ) -> Result<(), ArchiveError> {
        let max = self.caps.archive.max_object_bytes;
        let writer = self
            .table()
            .get_mut(&writer)
            .map_err(|e| ArchiveError::InvalidKey(format!("invalid writer handle: {e}")))?;
        if writer.upload.is_none() {
            return Err(ArchiveError::InvalidKey(
                "the writer is already finished".into(),
            ));
        }
        let size = writer.written + bytes.len() as u64;
        if size > writer.max_bytes {
            return Err(ArchiveError::TooLarge(format!(
                "`{}` would be {size} bytes; the grant allows {max} (grants.archive.max_object_bytes)",
                writer.key
            )));
        }
        writer.written = size;
        writer.buffer.extend_from_slice(&bytes);
        if writer.buffer.len() >= PART_BYTES {
            writer.flush_part().await?;
        }
        Ok(())
    }

    async fn finish(&mut self, writer: Resource<ObjectWriter>) -> Result<u64, ArchiveError> {
        let writer = self
            .table()
            .get_mut(&writer)
            .map_err(|e| ArchiveError::InvalidKey(format!("invalid writer handle: {e}")))?;
        // An empty object still needs one (empty) part on most stores.
        let empty = writer.written == 0;
        if empty {
            writer.buffer = Vec::new();
            let upload = writer
                .upload
                .as_mut()
                .ok_or_else(|| ArchiveError::InvalidKey("the writer is already finished".into()))?;
            upload
                .put_part(PutPayload::default())
                .await
                .map_err(|e| store_failed(&format!("writing `{}`", writer.key), e))?;
        } else {
            writer.flush_part().await?;
        }
        let mut upload = writer
            .upload
            .take()
            .ok_or_else(|| ArchiveError::InvalidKey("the writer is already finished".into()))?;
        upload
            .complete()
            .await
            .map_err(|e| store_failed(&format!("completing `{}`", writer.key), e))?;
        Ok(writer.written)
    }

    async fn drop(&mut self, writer: Resource<ObjectWriter>) -> wasmtime::Result<()> {
        let rep = writer.rep();
        self.table().delete(writer)?;
        self.caps.archive.open.retain(|r| *r != rep);
        Ok(())
    }
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
}
