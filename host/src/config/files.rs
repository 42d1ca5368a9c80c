//! Reading the config folder: every relevant file's bytes and content hash.
//!
//! Reading goes through symlinks on purpose: in a mounted ConfigMap or Secret every visible
//! file is a link into a `..data` folder that the kubelet swaps atomically. Hidden entries
//! (names starting with `.`, which includes `..data` and the timestamped folders) are skipped
//! so each file is seen once, through its stable name.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sha2::{Digest, Sha256};

use super::MAIN_FILE;

/// One file as read: its bytes and their sha256, or why it could not be read.
#[derive(Debug, Clone)]
pub struct FileRead {
    pub path: PathBuf,
    pub content: Result<Content, FileError>,
}

/// Why a config file could not be read, or read as text.
#[derive(Debug, Clone, thiserror::Error)]
pub enum FileError {
    #[error("{0}")]
    Io(Arc<std::io::Error>),
    #[error("larger than {MAX_FILE_BYTES} bytes; a config file is at most that")]
    TooLarge,
    #[error("nested {depth} levels deep in `[` or `{{`; at most {MAX_FLOW_DEPTH} are read")]
    TooDeep { depth: usize },
    #[error("not UTF-8 text: {0}")]
    NotUtf8(std::str::Utf8Error),
}

impl From<std::io::Error> for FileError {
    fn from(e: std::io::Error) -> FileError {
        FileError::Io(Arc::new(e))
    }
}

#[derive(Debug, Clone)]
pub struct Content {
    pub bytes: Arc<[u8]>,
    pub sha256: String,
}

impl Content {
    pub fn text(&self) -> Result<&str, FileError> {
        std::str::from_utf8(&self.bytes).map_err(FileError::NotUtf8)
    }
}

/// Hex sha256 of some bytes.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Largest config file read (main file, manifest, kubeconfig).
pub const MAX_FILE_BYTES: u64 = 1 << 20;
/// Deepest nesting of flow collections (`[`, `{`) a config file may have. The YAML parser
/// takes time that grows with the square of this depth before its own recursion limit
/// refuses the file (a minute for 100,000 levels), which would stall every reload.
pub const MAX_FLOW_DEPTH: usize = 64;

/// Read one config file (following symlinks), refusing one over [`MAX_FILE_BYTES`] or nested
/// deeper than [`MAX_FLOW_DEPTH`] before any parser sees it.
pub fn read(path: &Path) -> FileRead {
    let content = read_bounded(path).and_then(|bytes| {
        let depth = flow_depth(&bytes);
        if depth > MAX_FLOW_DEPTH {
            return Err(FileError::TooDeep { depth });
        }
        Ok(Content {
            sha256: sha256_hex(&bytes),
            bytes: Arc::from(bytes),
        })
    });
    FileRead {
        path: path.to_path_buf(),
        content,
    }
}

fn read_bounded(path: &Path) -> Result<Vec<u8>, FileError> {
    use std::io::Read;
    let file = std::fs::File::open(path)?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(FileError::TooLarge);
    }
    Ok(bytes)
}

/// The deepest nesting of YAML flow collections in `text`, outside quoted strings and
/// comments. Brackets inside plain scalars count too, which can only overstate the depth.
pub fn flow_depth(text: &[u8]) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let mut i = 0;
    let mut line_start = true;
    while i < text.len() {
        let c = text[i];
        match c {
            b'"' => {
                i += 1;
                while i < text.len() && text[i] != b'"' {
                    i += if text[i] == b'\\' { 2 } else { 1 };
                }
            }
            b'\'' => {
                i += 1;
                while i < text.len() {
                    if text[i] == b'\'' {
                        if text.get(i + 1) == Some(&b'\'') {
                            i += 1;
                        } else {
                            break;
                        }
                    }
                    i += 1;
                }
            }
            b'#' if line_start || i > 0 && text[i - 1].is_ascii_whitespace() => {
                while i < text.len() && text[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        line_start = c == b'\n';
        i += 1;
    }
    deepest
}

/// What identifies a file's content without reading it: if none of these changed, the bytes did
/// not either (a rewrite changes the modification or change time; a kubelet swap or an atomic
/// rename gives a new inode).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime_ns: i128,
    ctime_ns: i128,
}

impl Stamp {
    fn of(meta: &std::fs::Metadata) -> Stamp {
        use std::os::unix::fs::MetadataExt;
        Stamp {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
            ctime_ns: i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec()),
        }
    }
}

/// The components the manifests name, read and hashed again only when their file's metadata
/// changed. Components are megabytes; the folder is re-read on every file event and every
/// re-scan, and hashing every component each time kept a core busy at rest.
#[derive(Debug, Default)]
pub struct ComponentFiles {
    known: std::collections::HashMap<PathBuf, (Stamp, Content)>,
}

impl ComponentFiles {
    /// The file's bytes and sha256 (following symlinks).
    pub fn read(&mut self, path: &Path) -> std::io::Result<Content> {
        let stamp = Stamp::of(&std::fs::metadata(path)?);
        if let Some((known, content)) = self.known.get(path)
            && *known == stamp
        {
            return Ok(content.clone());
        }
        let bytes = std::fs::read(path)?;
        let content = Content {
            sha256: sha256_hex(&bytes),
            bytes: Arc::from(bytes),
        };
        self.known
            .insert(path.to_path_buf(), (stamp, content.clone()));
        Ok(content)
    }

    /// Forgets every component not in `keep` (the ones manifests still name).
    pub fn retain(&mut self, keep: &std::collections::HashSet<&Path>) {
        self.known.retain(|path, _| keep.contains(path.as_path()));
    }
}

/// Everything the folder holds, by role.
#[derive(Debug, Default)]
pub struct FolderScan {
    /// `None` when the main file does not exist.
    pub main: Option<FileRead>,
    /// Cluster name (file stem) → kubeconfig file.
    pub clusters: BTreeMap<String, FileRead>,
    /// Plugin name (file stem) → manifest file.
    pub manifests: BTreeMap<String, FileRead>,
    /// Files that could not be given a role (e.g. two files with the same stem).
    pub conflicts: Vec<(PathBuf, String)>,
    /// Folders that exist but could not be listed, with the error. A scan with any is
    /// incomplete and must change nothing.
    pub failed: Vec<(PathBuf, String)>,
}

/// The folders of a config besides its main file, as the main file names them.
#[derive(Debug, Clone, Copy)]
pub struct Folders<'a> {
    /// The clusters' kubeconfigs (`clusters_dir`).
    pub clusters: &'a Path,
    /// The plugins' manifests (`plugin_manifests_dir`).
    pub manifests: &'a Path,
}

/// Read the whole folder: the main file and, when `folders` is given, the plugins' manifests
/// and the clusters' kubeconfigs (at start the main file names those folders, so it is read
/// first and the rest added with [`add_manifests`] and [`add_clusters`]).
pub fn scan(root: &Path, folders: Option<Folders<'_>>) -> FolderScan {
    let mut scan = FolderScan::default();
    let main = root.join(MAIN_FILE);
    // Any entry counts, a link to nowhere or a loop included: reading it then fails, which
    // keeps the last good main file instead of falling back to the defaults.
    match std::fs::symlink_metadata(&main) {
        Ok(_) => scan.main = Some(read(&main)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => scan.failed.push((main.clone(), e.to_string())),
    }
    if let Some(folders) = folders {
        add_manifests(&mut scan, folders.manifests);
        add_clusters(&mut scan, folders.clusters);
    }
    scan
}

/// Reads the plugins' manifests in `dir` (files ending in `.yaml` or `.yml`) into `scan`.
pub fn add_manifests(scan: &mut FolderScan, dir: &Path) {
    match visible_files(dir) {
        Ok(files) => {
            for path in files {
                let is_yaml = matches!(
                    path.extension().and_then(|e| e.to_str()),
                    Some("yaml" | "yml")
                );
                if is_yaml {
                    add_by_stem(&mut scan.manifests, &mut scan.conflicts, path);
                }
            }
        }
        Err(e) => scan.failed.push((dir.to_path_buf(), e.to_string())),
    }
}

/// Reads the clusters' kubeconfigs in `dir` into `scan`.
pub fn add_clusters(scan: &mut FolderScan, dir: &Path) {
    match visible_files(dir) {
        Ok(files) => {
            for path in files {
                add_by_stem(&mut scan.clusters, &mut scan.conflicts, path);
            }
        }
        Err(e) => scan.failed.push((dir.to_path_buf(), e.to_string())),
    }
}

fn add_by_stem(
    into: &mut BTreeMap<String, FileRead>,
    conflicts: &mut Vec<(PathBuf, String)>,
    path: PathBuf,
) {
    let Some(stem) = path
        .file_stem()
        .and_then(|s| s.to_str())
        .map(str::to_string)
    else {
        conflicts.push((path, "file name is not UTF-8".into()));
        return;
    };
    if let Some(first) = into.get(&stem) {
        conflicts.push((
            path.clone(),
            format!("name `{stem}` is already taken by {}", first.path.display()),
        ));
        return;
    }
    into.insert(stem, read(&path));
}

/// The entries directly in `dir` that may be config files, sorted, hidden names skipped; a
/// folder that does not exist has none. Anything visible counts, not only regular files: a
/// link whose target is not there yet (the kubelet can create links first), or a name that has
/// become a folder, is kept, so reading it fails and keeps its last good version instead of
/// looking like a removed file. Fails when the folder exists but cannot be listed in full.
fn visible_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry?;
        if !entry.file_name().to_string_lossy().starts_with('.') {
            files.push(entry.path());
        }
    }
    files.sort();
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flow_depth_skips_quotes_and_comments() {
        assert_eq!(flow_depth(b"kinds: [{name: a}, {name: b}]"), 2);
        assert_eq!(
            flow_depth(b"a: \"[[[[\"\nb: '{{{{'' [[['\n# [[[[[\nc: [1]"),
            1
        );
        assert_eq!(flow_depth(b"a: \"\\\"[[\"\nb: []"), 1);
        assert_eq!(flow_depth(b"x: y"), 0);
        let deep = format!("k: {}{}", "[".repeat(1000), "]".repeat(1000));
        assert_eq!(flow_depth(deep.as_bytes()), 1000);
    }

    #[test]
    fn big_or_deep_files_are_refused_before_parsing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let big = dir.path().join("big.yaml");
        std::fs::write(&big, vec![b'#'; (MAX_FILE_BYTES + 1) as usize]).expect("write");
        let why = read(&big).content.expect_err("too big").to_string();
        assert!(why.contains("larger than"), "{why}");
        let deep = dir.path().join("deep.yaml");
        let text = format!("kinds: {}{}", "[".repeat(100_000), "]".repeat(100_000));
        std::fs::write(&deep, text).expect("write");
        let why = read(&deep).content.expect_err("too deep").to_string();
        assert!(why.contains("nested 100000 levels"), "{why}");
        let fine = dir.path().join("fine.yaml");
        std::fs::write(&fine, "kinds: [{name: volcano-job}]\n").expect("write");
        assert!(read(&fine).content.is_ok());
    }
}
