//! Objects being written: the writer a plugin streams into (uploaded part by part, visible only
//! once complete, aborted if dropped) and the one-shot put, both reserving quota for what they
//! add beyond the object they replace.
//!
//! Apart from the interface because this is where bytes meet the store: parts, completion,
//! abort, and the quota's bookkeeping on each outcome.

use std::sync::Arc;

use object_store::path::Path as StorePath;
use object_store::{MultipartUpload, ObjectStore, PutPayload};

use super::quota::Quota;
use super::{ArchiveAccess, ArchiveError};

/// Bytes buffered before a part is uploaded: S3's minimum part size.
const PART_BYTES: usize = 5 << 20;

/// The size of the object at `path` now, 0 if there is none.
async fn current_size(store: &dyn ObjectStore, path: &StorePath) -> Result<u64, ArchiveError> {
    match store.head(path).await {
        Ok(meta) => Ok(meta.size),
        Err(object_store::Error::NotFound { .. }) => Ok(0),
        Err(e) => Err(store_failed(&format!("reading `{path}`"), e)),
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
    pub(super) async fn create_writer(
        &mut self,
        key: String,
    ) -> Result<ObjectWriter, ArchiveError> {
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

    pub(super) async fn put_object(
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
    pub(super) fn replayed(key: String, plugin: Arc<str>) -> ObjectWriter {
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

    pub(super) async fn write(&mut self, bytes: Vec<u8>) -> Result<(), ArchiveError> {
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

    pub(super) async fn finish(&mut self) -> Result<u64, ArchiveError> {
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
