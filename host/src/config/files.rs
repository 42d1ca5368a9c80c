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

use super::main_file::MAIN_FILE;

/// One file as read: its bytes and their sha256, or why it could not be read.
#[derive(Debug, Clone)]
pub struct FileRead {
    pub path: PathBuf,
    pub content: Result<Content, String>,
}

#[derive(Debug, Clone)]
pub struct Content {
    pub bytes: Arc<[u8]>,
    pub sha256: String,
}

impl Content {
    pub fn text(&self) -> Result<&str, String> {
        std::str::from_utf8(&self.bytes).map_err(|e| format!("not UTF-8 text: {e}"))
    }
}

/// Hex sha256 of some bytes.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Read one file (following symlinks).
pub fn read(path: &Path) -> FileRead {
    let content = std::fs::read(path)
        .map(|b| Content {
            sha256: sha256_hex(&b),
            bytes: Arc::from(b),
        })
        .map_err(|e| e.to_string());
    FileRead {
        path: path.to_path_buf(),
        content,
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
}

/// Read the whole folder.
pub fn scan(root: &Path) -> FolderScan {
    let mut scan = FolderScan::default();
    let main = root.join(MAIN_FILE);
    if main.exists() {
        scan.main = Some(read(&main));
    }
    for path in visible_files(&root.join("clusters")) {
        add_by_stem(&mut scan.clusters, &mut scan.conflicts, path);
    }
    for path in visible_files(&root.join("plugins")) {
        let is_yaml = matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml")
        );
        if is_yaml {
            add_by_stem(&mut scan.manifests, &mut scan.conflicts, path);
        }
    }
    scan
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

/// Regular files and links to files directly in `dir`, sorted, hidden names skipped.
fn visible_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .filter(|e| {
            let path = e.path();
            // A link whose target is not there yet (the kubelet can create links first) is
            // kept: reading it fails, which keeps the last good version, instead of looking
            // like a removed file.
            path.is_file() || (e.file_type().is_ok_and(|t| t.is_symlink()) && !path.is_dir())
        })
        .map(|e| e.path())
        .collect();
    files.sort();
    files
}
