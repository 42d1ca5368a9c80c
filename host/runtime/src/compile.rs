//! Compiling components, with an in-memory and an on-disk cache.
//!
//! Compiling is the slow step of a load (tens of milliseconds for a small release component,
//! seconds for a large debug one), so it runs on the blocking pool, never on an async worker,
//! and is skipped whenever possible:
//!
//! - in memory, components are kept by the sha256 of their bytes: a manifest-only change (new
//!   config, limits or grants) reuses the compiled code, and two plugins shipping the same
//!   `.wasm` share it. Concurrent loads of the same bytes compile once.
//! - on disk (when `cache_dir` is set), serialized components are kept by sha256 of the bytes
//!   plus a hash of the engine's compilation settings, so a restart does not recompile and an
//!   upgraded host never loads code compiled for another configuration. A cache file is
//!   written atomically (temporary file, then rename) and carries its own key and a checksum
//!   of its payload; a file that does not match is ignored, deleted and rebuilt. Files of
//!   other engine configurations are deleted when the runtime starts. The folder is kept
//!   under `runtime.cache_max_mb`: when the runtime starts and after each file it writes, the
//!   least recently used files are deleted until the rest fit (a hit refreshes its file's
//!   time). Why a bound and not only the old engines' files: an author's `plugin dev` loop
//!   writes a new file at every save, so an afternoon's builds filled hundreds of MB.

use std::collections::HashMap;
use std::fs;
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use sha2::{Digest, Sha256};
use tokio::sync::OnceCell;
use wasmtime::Engine;
use wasmtime::component::Component;

/// Where a loaded version's compiled code came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ComponentSource {
    /// Compiled by this load.
    Compiled,
    /// Already compiled in this process (same bytes loaded before).
    MemoryCache,
    /// Read from the on-disk cache.
    DiskCache,
}

impl ComponentSource {
    /// The source as the load's log line names it (`memory_cache`).
    pub fn as_str(self) -> &'static str {
        match self {
            ComponentSource::Compiled => "compiled",
            ComponentSource::MemoryCache => "memory_cache",
            ComponentSource::DiskCache => "disk_cache",
        }
    }
}

/// Counters of the component cache since the runtime was built.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Components compiled from their bytes: neither cache had them.
    pub compiled: u64,
    /// Loads answered from the in-memory cache.
    pub memory_hits: u64,
    /// Loads answered from the on-disk cache.
    pub disk_hits: u64,
    /// Cache files ignored because they did not match their key or checksum.
    pub disk_rejected: u64,
    /// Cache files that could not be written (the load still succeeded).
    pub disk_write_failures: u64,
}

/// Compiled components kept in memory. Small: entries are cheap handles, but each keeps its
/// compiled code mapped, so old versions are evicted once no longer among the recent ones.
const MEMORY_ENTRIES: usize = 64;

/// Magic and format version at the start of every cache file.
const MAGIC: &[u8; 8] = b"JRCWASM\x01";
const HEADER_LEN: usize = 8 + 32 + 32 + 32 + 8;

pub(crate) struct ComponentCache {
    engine: Engine,
    /// sha256 of the engine's `precompile_compatibility_hash`.
    compat: [u8; 32],
    disk: Option<PathBuf>,
    /// The most the disk cache's files may hold, in bytes.
    disk_max_bytes: u64,
    memory: Mutex<MemoryCache>,
    compiled: AtomicU64,
    memory_hits: AtomicU64,
    disk_hits: AtomicU64,
    disk_rejected: AtomicU64,
    disk_write_failures: AtomicU64,
}

type Slot = Arc<OnceCell<(Component, ComponentSource)>>;

#[derive(Default)]
struct MemoryCache {
    entries: HashMap<String, (Slot, u64)>,
    clock: u64,
}

impl MemoryCache {
    fn slot(&mut self, key: &str) -> Slot {
        self.clock += 1;
        let now = self.clock;
        let slot = match self.entries.get_mut(key) {
            Some((slot, used)) => {
                *used = now;
                slot.clone()
            }
            None => {
                let slot = Slot::default();
                self.entries.insert(key.to_string(), (slot.clone(), now));
                slot
            }
        };
        while self.entries.len() > MEMORY_ENTRIES {
            let oldest = self
                .entries
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| k.clone());
            match oldest {
                Some(k) => self.entries.remove(&k),
                None => break,
            };
        }
        slot
    }
}

impl ComponentCache {
    /// `disk`: the cache folder, created if missing; if it cannot be created the disk cache is
    /// off (with a warning) rather than the runtime failing. `disk_max_bytes`: what its files
    /// may hold (least recently used deleted first).
    pub(crate) fn new(
        engine: Engine,
        disk: Option<PathBuf>,
        disk_max_bytes: u64,
    ) -> ComponentCache {
        let disk = disk.and_then(|dir| match fs::create_dir_all(&dir) {
            Ok(()) => Some(dir),
            Err(e) => {
                tracing::warn!(
                    dir = %dir.display(),
                    error = %e,
                    "cannot create the component cache folder; compiling without a disk cache"
                );
                None
            }
        });
        let compat = compatibility_hash(&engine);
        if let Some(dir) = &disk {
            prune_foreign_files(dir, &hex::encode(&compat[..8]));
            keep_under(dir, disk_max_bytes, None);
        }
        ComponentCache {
            engine,
            compat,
            disk,
            disk_max_bytes,
            memory: Mutex::new(MemoryCache::default()),
            compiled: AtomicU64::new(0),
            memory_hits: AtomicU64::new(0),
            disk_hits: AtomicU64::new(0),
            disk_rejected: AtomicU64::new(0),
            disk_write_failures: AtomicU64::new(0),
        }
    }

    pub(crate) fn stats(&self) -> CacheStats {
        CacheStats {
            compiled: self.compiled.load(Ordering::Relaxed),
            memory_hits: self.memory_hits.load(Ordering::Relaxed),
            disk_hits: self.disk_hits.load(Ordering::Relaxed),
            disk_rejected: self.disk_rejected.load(Ordering::Relaxed),
            disk_write_failures: self.disk_write_failures.load(Ordering::Relaxed),
        }
    }

    /// The cache file for `sha256` (hex) under this engine, if the disk cache is on.
    pub(crate) fn disk_path(&self, sha256: &str) -> Option<PathBuf> {
        let dir = self.disk.as_ref()?;
        Some(dir.join(format!("{sha256}-{}.cwasm", hex::encode(&self.compat[..8]))))
    }

    /// The compiled component for `wasm`, whose sha256 (hex, already verified) is `sha256`.
    pub(crate) async fn get(
        self: &Arc<Self>,
        sha256: &str,
        wasm: Arc<[u8]>,
    ) -> Result<(Component, ComponentSource), CompileError> {
        let slot = self.memory.lock().slot(sha256);
        let ran_here = Arc::new(AtomicBool::new(false));
        let result = slot
            .get_or_try_init(|| {
                let this = Arc::clone(self);
                let sha256 = sha256.to_string();
                let ran_here = Arc::clone(&ran_here);
                async move {
                    ran_here.store(true, Ordering::Relaxed);
                    tokio::task::spawn_blocking(move || this.load_or_compile(&sha256, &wasm))
                        .await
                        .map_err(|e| CompileError::task("compilation", e))?
                }
            })
            .await;
        match result {
            Ok((component, source)) => {
                let source = if ran_here.load(Ordering::Relaxed) {
                    *source
                } else {
                    self.memory_hits.fetch_add(1, Ordering::Relaxed);
                    ComponentSource::MemoryCache
                };
                Ok((component.clone(), source))
            }
            Err(e) => {
                // Do not keep a slot for bytes that do not compile.
                let mut memory = self.memory.lock();
                if memory
                    .entries
                    .get(sha256)
                    .is_some_and(|(s, _)| Arc::ptr_eq(s, &slot))
                {
                    memory.entries.remove(sha256);
                }
                Err(e)
            }
        }
    }

    /// Blocking: the disk cache, else a compilation (stored to disk afterwards).
    fn load_or_compile(
        &self,
        sha256: &str,
        wasm: &[u8],
    ) -> Result<(Component, ComponentSource), CompileError> {
        let path = self.disk_path(sha256);
        if let Some(path) = &path {
            match self.read_cache_file(path, sha256) {
                Ok(Some(component)) => {
                    self.disk_hits.fetch_add(1, Ordering::Relaxed);
                    touch(path);
                    prepare_image(&component);
                    return Ok((component, ComponentSource::DiskCache));
                }
                Ok(None) => {}
                Err(reason) => {
                    self.disk_rejected.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(
                        file = %path.display(),
                        reason = %reason,
                        "ignoring an invalid component cache file; recompiling"
                    );
                    let _ = fs::remove_file(path);
                }
            }
        }
        // Said before it starts: a large component (a Python one, a debug build) takes
        // seconds, which would otherwise pass in silence.
        tracing::info!(
            sha256 = %sha256,
            megabytes = format_args!("{:.1}", wasm.len() as f64 / (1 << 20) as f64),
            "compiling a component (seconds for a large one; once, then cached)"
        );
        let started = std::time::Instant::now();
        let component = Component::new(&self.engine, wasm)
            .map_err(|e| CompileError::Refused(format!("{e:#}")))?;
        tracing::info!(sha256 = %sha256, elapsed_ms = started.elapsed().as_millis() as u64,
            "compiled");
        self.compiled.fetch_add(1, Ordering::Relaxed);
        prepare_image(&component);
        if let Some(path) = &path {
            match self.write_cache_file(path, sha256, &component) {
                Ok(()) => {
                    if let Some(dir) = &self.disk {
                        keep_under(dir, self.disk_max_bytes, Some(path));
                    }
                }
                Err(e) => {
                    self.disk_write_failures.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(
                        file = %path.display(),
                        error = %e,
                        "cannot write the component cache file; the next start will compile again"
                    );
                }
            }
        }
        Ok((component, ComponentSource::Compiled))
    }

    /// `Ok(None)`: no cache file. `Err`: a file that must not be trusted.
    fn read_cache_file(
        &self,
        path: &Path,
        sha256: &str,
    ) -> Result<Option<Component>, CacheFileError> {
        let bytes = match fs::read(path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(CacheFileError::Read(e)),
        };
        let payload = check_cache_file(&bytes, &wasm_key(sha256)?, &self.compat)?;
        // SAFETY: `Component::deserialize` requires bytes produced by `Component::serialize`
        // of a compatible engine. `check_cache_file` verified that this file was written by
        // `write_cache_file` for these wasm bytes under an engine with the same compatibility
        // hash, and that the payload is intact (sha256). The folder is jobrelay's own; its
        // documentation requires that nobody else can write there.
        let component = unsafe { Component::deserialize(&self.engine, payload) }
            .map_err(|e| CacheFileError::Refused(format!("{e:#}")))?;
        Ok(Some(component))
    }

    fn write_cache_file(
        &self,
        path: &Path,
        sha256: &str,
        component: &Component,
    ) -> Result<(), CacheFileError> {
        let payload = component
            .serialize()
            .map_err(|e| CacheFileError::Serialize(format!("{e:#}")))?;
        let mut bytes = Vec::with_capacity(HEADER_LEN + payload.len());
        bytes.extend_from_slice(MAGIC);
        bytes.extend_from_slice(&wasm_key(sha256)?);
        bytes.extend_from_slice(&self.compat);
        bytes.extend_from_slice(&Sha256::digest(&payload));
        bytes.extend_from_slice(&(payload.len() as u64).to_le_bytes());
        bytes.extend_from_slice(&payload);
        write_atomically(path, &bytes).map_err(CacheFileError::Write)
    }
}

/// Why a cache file is not used (it is then deleted and the bytes compiled again), or could
/// not be written (the next start compiles again).
#[derive(Debug, thiserror::Error)]
enum CacheFileError {
    #[error("cannot read: {0}")]
    Read(std::io::Error),
    /// The plugin's sha256 is not 64 hex digits.
    #[error("`{0}` is not a hex sha256")]
    NotHex(String),
    #[error("`{0}` is not a 32-byte sha256")]
    NotSha256(String),
    #[error("shorter than its header")]
    Short,
    #[error("not a jobrelay cache file (or another format version)")]
    NotCacheFile,
    #[error("written for other wasm bytes")]
    OtherWasm,
    #[error("written by an engine with other settings")]
    OtherEngine,
    #[error("truncated")]
    Truncated,
    #[error("checksum mismatch")]
    Checksum,
    /// wasmtime would not deserialize the payload; its chain of causes, as text.
    #[error("wasmtime refused the payload: {0}")]
    Refused(String),
    /// wasmtime could not serialize the component; its chain of causes, as text.
    #[error("{0}")]
    Serialize(String),
    #[error("{0}")]
    Write(std::io::Error),
}

/// Why no component could be had for a plugin's bytes.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CompileError {
    /// wasmtime refused the bytes: corrupt, a core module rather than a component, or a
    /// feature it does not support. Held as text with wasmtime's whole chain of causes, since
    /// wasmtime's error type is not a standard error that could be kept as a source.
    #[error("{0}")]
    Refused(String),
    /// The blocking task that hashed or compiled the bytes panicked or was cancelled.
    #[error("{what} task failed: {source}")]
    Task {
        /// What the task did: `hashing` or `compilation`.
        what: &'static str,
        /// tokio's error, shared so the error can be cloned.
        #[source]
        source: Arc<tokio::task::JoinError>,
    },
    /// The manifest's `wasm_sha256` is not the hash of the bytes.
    #[error("the given sha256 {expected} does not match the bytes ({actual})")]
    Sha256Mismatch {
        /// The hash the manifest gives, hex.
        expected: String,
        /// The hash of the bytes, hex.
        actual: String,
    },
}

impl CompileError {
    pub(crate) fn task(what: &'static str, source: tokio::task::JoinError) -> CompileError {
        CompileError::Task {
            what,
            source: Arc::new(source),
        }
    }
}

/// Makes the copy-on-write memory image now, at load, rather than on the first call.
fn prepare_image(component: &Component) {
    if let Err(e) = component.initialize_copy_on_write_image() {
        tracing::debug!(error = %format!("{e:#}"), "no copy-on-write image; instances copy data segments");
    }
}

fn wasm_key(sha256: &str) -> Result<[u8; 32], CacheFileError> {
    let raw = hex::decode(sha256).map_err(|_| CacheFileError::NotHex(sha256.to_string()))?;
    raw.try_into()
        .map_err(|_| CacheFileError::NotSha256(sha256.to_string()))
}

/// The payload of a cache file, if its header matches the expected key and its checksum.
fn check_cache_file<'a>(
    bytes: &'a [u8],
    wasm_key: &[u8; 32],
    compat: &[u8; 32],
) -> Result<&'a [u8], CacheFileError> {
    if bytes.len() < HEADER_LEN {
        return Err(CacheFileError::Short);
    }
    let (header, payload) = bytes.split_at(HEADER_LEN);
    if &header[..8] != MAGIC {
        return Err(CacheFileError::NotCacheFile);
    }
    if &header[8..40] != wasm_key {
        return Err(CacheFileError::OtherWasm);
    }
    if &header[40..72] != compat {
        return Err(CacheFileError::OtherEngine);
    }
    let mut len = [0u8; 8];
    len.copy_from_slice(&header[104..112]);
    if u64::from_le_bytes(len) != payload.len() as u64 {
        return Err(CacheFileError::Truncated);
    }
    if Sha256::digest(payload).as_slice() != &header[72..104] {
        return Err(CacheFileError::Checksum);
    }
    Ok(payload)
}

fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(
        ".{name}.{}.{}.tmp",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| {
        let mut file = fs::File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Deletes cache files this engine can never use (written by another wasmtime version or
/// configuration) and temporary files left by an interrupted write, so an upgraded host does
/// not keep its predecessor's artifacts forever. Touches only names this module writes.
fn prune_foreign_files(dir: &Path, compat_hex: &str) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let ours = format!("-{compat_hex}.cwasm");
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let is_temp = name.starts_with('.') && name.contains(".cwasm.") && name.ends_with(".tmp");
        let is_foreign = is_cache_file_name(&name) && !name.ends_with(&ours);
        if (is_temp || is_foreign) && fs::remove_file(entry.path()).is_ok() {
            tracing::debug!(file = %name, "removed a stale component cache file");
        }
    }
}

/// Deletes the least recently used cache files (by modification time, which a hit refreshes)
/// until the cache files in `dir` hold at most `max_bytes`; `keep`, the file just written, is
/// never deleted, even when it alone is larger. Touches only names this module writes.
/// Returns how many files were deleted.
fn keep_under(dir: &Path, max_bytes: u64, keep: Option<&Path>) -> usize {
    let Ok(entries) = fs::read_dir(dir) else {
        return 0;
    };
    let mut files: Vec<(SystemTime, u64, PathBuf)> = entries
        .flatten()
        .filter(|entry| is_cache_file_name(&entry.file_name().to_string_lossy()))
        .filter_map(|entry| {
            let meta = entry.metadata().ok()?;
            let used = meta.modified().unwrap_or(UNIX_EPOCH);
            Some((used, meta.len(), entry.path()))
        })
        .collect();
    let mut total: u64 = files.iter().map(|(_, len, _)| len).sum();
    if total <= max_bytes {
        return 0;
    }
    files.sort_by_key(|(used, _, _)| *used);
    let mut removed = 0;
    for (_, len, path) in files {
        if total <= max_bytes {
            break;
        }
        if keep == Some(path.as_path()) {
            continue;
        }
        if fs::remove_file(&path).is_ok() {
            total = total.saturating_sub(len);
            removed += 1;
        }
    }
    if removed > 0 {
        tracing::info!(
            dir = %dir.display(),
            removed,
            max_mb = max_bytes >> 20,
            "removed the least recently used compiled components to keep the cache under \
             runtime.cache_max_mb"
        );
    }
    removed
}

/// Marks a cache file as just used, for [`keep_under`]. A failure only makes the file look
/// older than it is.
fn touch(path: &Path) {
    let _ = fs::File::options()
        .write(true)
        .open(path)
        .and_then(|file| file.set_modified(SystemTime::now()));
}

/// `<64 hex>-<16 hex>.cwasm`
fn is_cache_file_name(name: &str) -> bool {
    let Some(stem) = name.strip_suffix(".cwasm") else {
        return false;
    };
    match stem.split_once('-') {
        Some((wasm, compat)) => {
            wasm.len() == 64
                && compat.len() == 16
                && wasm
                    .chars()
                    .chain(compat.chars())
                    .all(|c| c.is_ascii_hexdigit())
        }
        None => false,
    }
}

/// sha256 of the engine's compatibility hash: equal for engines whose compiled code is
/// interchangeable (same wasmtime version, target, compiler flags and tunables).
fn compatibility_hash(engine: &Engine) -> [u8; 32] {
    let mut hasher = Sha256Hasher(Sha256::new());
    engine.precompile_compatibility_hash().hash(&mut hasher);
    hasher.0.finalize().into()
}

/// Feeds `Hash` input into sha256, for a hash that is stable across processes (std's
/// `DefaultHasher` makes no such promise).
struct Sha256Hasher(Sha256);

impl Hasher for Sha256Hasher {
    fn finish(&self) -> u64 {
        let digest = self.0.clone().finalize();
        let mut first = [0u8; 8];
        first.copy_from_slice(&digest[..8]);
        u64::from_le_bytes(first)
    }

    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}

/// Hex sha256 of `bytes`.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_file_header_is_checked() {
        let key = [1u8; 32];
        let compat = [2u8; 32];
        let payload = b"compiled code";
        let mut bytes = Vec::new();
        bytes.extend_from_slice(MAGIC);
        bytes.extend_from_slice(&key);
        bytes.extend_from_slice(&compat);
        bytes.extend_from_slice(&Sha256::digest(payload));
        bytes.extend_from_slice(&(payload.len() as u64).to_le_bytes());
        bytes.extend_from_slice(payload);
        assert_eq!(
            check_cache_file(&bytes, &key, &compat).expect("valid"),
            payload
        );
        assert!(check_cache_file(&bytes, &[9u8; 32], &compat).is_err());
        assert!(check_cache_file(&bytes, &key, &[9u8; 32]).is_err());
        let mut flipped = bytes.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        assert!(check_cache_file(&flipped, &key, &compat).is_err());
        assert!(check_cache_file(&bytes[..bytes.len() - 1], &key, &compat).is_err());
        assert!(check_cache_file(&bytes[..10], &key, &compat).is_err());
    }

    #[test]
    fn stale_files_are_pruned_and_others_kept() {
        let dir = tempfile::tempdir().expect("tempdir");
        let wasm = "ab".repeat(32);
        let current = format!("{wasm}-{}.cwasm", "1".repeat(16));
        let old = format!("{wasm}-{}.cwasm", "2".repeat(16));
        let temp = format!(".{current}.12.0.tmp");
        for name in [&current, &old, &temp, &"notes.txt".to_string()] {
            fs::write(dir.path().join(name), b"x").expect("write");
        }
        prune_foreign_files(dir.path(), &"1".repeat(16));
        assert!(dir.path().join(&current).exists());
        assert!(!dir.path().join(&old).exists());
        assert!(!dir.path().join(&temp).exists());
        assert!(dir.path().join("notes.txt").exists());
    }

    /// The folder is kept under its bound by deleting the least recently used files; a hit's
    /// file counts as just used; the file just written stays even when it alone is over.
    #[test]
    fn the_disk_cache_keeps_under_its_bound_least_recently_used_first() {
        let dir = tempfile::tempdir().expect("tempdir");
        let name = |i: u8| format!("{}-{}.cwasm", format!("{i:02x}").repeat(32), "1".repeat(16));
        let start = SystemTime::now() - std::time::Duration::from_secs(3600);
        for i in 0..5u8 {
            let path = dir.path().join(name(i));
            fs::write(&path, vec![0u8; 1000]).expect("write");
            let file = fs::File::options().write(true).open(&path).expect("open");
            file.set_modified(start + std::time::Duration::from_secs(u64::from(i) * 60))
                .expect("set time");
        }
        fs::write(dir.path().join("notes.txt"), vec![0u8; 10_000]).expect("write");
        // The oldest, used now: it is the newest.
        touch(&dir.path().join(name(0)));
        assert_eq!(keep_under(dir.path(), 5000, None), 0, "within the bound");
        assert_eq!(keep_under(dir.path(), 3000, None), 2);
        let left: Vec<bool> = (0..5).map(|i| dir.path().join(name(i)).exists()).collect();
        assert_eq!(left, [true, false, false, true, true]);
        assert!(
            dir.path().join("notes.txt").exists(),
            "not ours, not counted"
        );
        // The file just written is kept even when it alone is over the bound.
        let kept = dir.path().join(name(1));
        fs::write(&kept, vec![0u8; 4000]).expect("write");
        keep_under(dir.path(), 2000, Some(&kept));
        let left: Vec<bool> = (0..5).map(|i| dir.path().join(name(i)).exists()).collect();
        assert_eq!(left, [false, true, false, false, false]);
    }

    #[test]
    fn memory_cache_evicts_least_recently_used() {
        let mut m = MemoryCache::default();
        let first = m.slot("first");
        for i in 0..MEMORY_ENTRIES {
            m.slot(&format!("k{i}"));
            // keep "first" recent
            if i == MEMORY_ENTRIES / 2 {
                m.slot("first");
            }
        }
        assert_eq!(m.entries.len(), MEMORY_ENTRIES);
        assert!(Arc::ptr_eq(&m.slot("first"), &first));
        assert!(!m.entries.contains_key("k0"));
    }
}
