//! Writing files the way the kubelet updates a mounted ConfigMap or Secret volume.
//!
//! The kubelet writes every key into a new timestamped folder, points a temporary `..data_tmp`
//! link at it and renames that link over `..data` (the atomic step); the visible files are links
//! `name -> ..data/name`. Keys that disappeared lose their visible link, and the old folder is
//! deleted. A watch on a visible file follows the old inode and dies with the first update.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;

/// Publish `files` (name, content) as the new content of the volume mounted at `dir`, with a
/// timestamped folder named `stamp` (e.g. `..2026_11_21_10_00_00.1`).
pub fn kubelet_write(dir: &Path, stamp: &str, files: &[(&str, &str)]) -> std::io::Result<()> {
    fs::create_dir_all(dir)?;
    let data = dir.join(stamp);
    fs::create_dir(&data)?;
    for (name, text) in files {
        fs::write(data.join(name), text)?;
    }
    let old = fs::read_link(dir.join("..data")).ok();
    symlink(stamp, dir.join("..data_tmp"))?;
    fs::rename(dir.join("..data_tmp"), dir.join("..data"))?;
    for (name, _) in files {
        let visible = dir.join(name);
        if fs::symlink_metadata(&visible).is_err() {
            symlink(format!("..data/{name}"), &visible)?;
        }
    }
    for entry in fs::read_dir(dir)?.flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        if !name.starts_with('.') && !files.iter().any(|(n, _)| *n == name) {
            fs::remove_file(entry.path())?;
        }
    }
    if let Some(old) = old {
        fs::remove_dir_all(dir.join(old))?;
    }
    Ok(())
}
