//! Granted directories, through the standard `wasi:filesystem` interfaces.
//!
//! Each `DirGrant` of the manifest becomes a preopened directory: the plugin sees the host
//! directory under the guest path, read-only or read-write, and nothing else of the disk.
//! wasmtime-wasi resolves every path relative to the preopened handle and refuses `..` and
//! symlinks leading out of it.
//!
//! The directory is opened anew for every call (one `open` per grant): a `WasiCtx` cannot be
//! cloned and wasmtime-wasi 48 offers no way to hand it an already-open handle. The path opened
//! is the one resolved at load, so a symlink changed later does not move the grant.

use std::collections::BTreeSet;
use std::path::{Component, Path};

use wasmtime_wasi::FsPerms;

use super::{CallScope, Capability, GrantProblem, LoadScope, StoreSetup};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::Grants;

/// One host directory made visible to a plugin under a guest path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DirGrant {
    /// Directory on the host; relative paths are resolved against the config folder. It is
    /// created if missing.
    pub host: PathBuf,
    /// Where the plugin sees it, e.g. `/data`.
    pub guest: String,
    /// Whether the plugin may create and write files there.
    #[serde(default)]
    pub writable: bool,
}

/// The filesystem capability.
pub struct Filesystem;

impl Capability for Filesystem {
    fn name(&self) -> &'static str {
        "filesystem"
    }

    fn prepare(&self, grants: &mut Grants, _load: &LoadScope<'_>) -> Result<(), GrantProblem> {
        let mut guests = BTreeSet::new();
        for grant in &mut grants.filesystem {
            check_guest_path(&grant.guest)?;
            if !guests.insert(grant.guest.clone()) {
                return Err(format!("guest path `{}` is granted twice", grant.guest).into());
            }
            if !grant.host.is_absolute() {
                return Err(
                    format!("host path `{}` must be absolute", grant.host.display()).into(),
                );
            }
            std::fs::create_dir_all(&grant.host).map_err(|e| {
                GrantProblem::io(
                    format!("cannot create directory `{}`", grant.host.display()),
                    e,
                )
            })?;
            // Pin the grant to the real directory, so a symlink changed later cannot
            // redirect the plugin elsewhere.
            let real = grant.host.canonicalize().map_err(|e| {
                GrantProblem::io(format!("cannot resolve `{}`", grant.host.display()), e)
            })?;
            if !real.is_dir() {
                return Err(format!("`{}` is not a directory", real.display()).into());
            }
            grant.host = real;
        }
        Ok(())
    }

    fn configure(&self, call: &CallScope<'_>, setup: &mut StoreSetup) -> Result<(), GrantProblem> {
        let Some(wasi) = setup.wasi.as_mut() else {
            return Ok(()); // a kept instance keeps its preopened directories
        };
        for grant in &call.grants.filesystem {
            let perms = if grant.writable {
                FsPerms::ReadWrite
            } else {
                FsPerms::ReadOnly
            };
            wasi.preopened_dir(&grant.host, &grant.guest, perms)
                .map_err(|e| {
                    format!(
                        "cannot open granted directory `{}`: {e:#}",
                        grant.host.display()
                    )
                })?;
        }
        Ok(())
    }
}

/// A guest path is absolute, normalised and not the root: `/data`, `/var/out`.
fn check_guest_path(guest: &str) -> Result<(), GrantProblem> {
    let path = Path::new(guest);
    let mut normal = 0;
    for part in path.components() {
        match part {
            Component::RootDir => {}
            Component::Normal(_) => normal += 1,
            _ => {
                return Err(format!("guest path `{guest}` must not contain `.` or `..`").into());
            }
        }
    }
    if !guest.starts_with('/') || normal == 0 {
        return Err(format!(
            "guest path `{guest}` must be an absolute path below `/`, e.g. `/data`"
        )
        .into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grants(host: &Path, guest: &str) -> Grants {
        Grants {
            filesystem: vec![DirGrant {
                host: host.to_path_buf(),
                guest: guest.to_string(),
                writable: true,
            }],
            ..Grants::default()
        }
    }

    fn load() -> LoadScope<'static> {
        static SERVICES: std::sync::LazyLock<crate::Services> =
            std::sync::LazyLock::new(Default::default);
        LoadScope {
            plugin: "test",
            services: &SERVICES,
        }
    }

    #[test]
    fn guest_paths() {
        assert!(check_guest_path("/data").is_ok());
        assert!(check_guest_path("/var/out").is_ok());
        assert!(check_guest_path("/").is_err());
        assert!(check_guest_path("data").is_err());
        assert!(check_guest_path("/data/../etc").is_err());
    }

    #[test]
    fn prepare_creates_and_pins_directories() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("a/b");
        let mut g = grants(&dir, "/data");
        Filesystem.prepare(&mut g, &load()).expect("prepared");
        assert!(dir.is_dir());
        assert!(g.filesystem[0].host.is_absolute());
    }

    /// A directory that cannot be made fails the grant with the I/O error as its source, so
    /// the load error's chain ends at the operating system's answer.
    #[test]
    fn a_directory_that_cannot_be_made_keeps_its_cause() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let file = tmp.path().join("a-file");
        std::fs::write(&file, b"x").expect("write");
        let mut g = grants(&file.join("data"), "/data");
        let err = Filesystem.prepare(&mut g, &load()).unwrap_err();
        assert!(matches!(err, GrantProblem::Io { .. }), "{err:?}");
        let cause = std::error::Error::source(&err).expect("the I/O error");
        assert!(err.to_string().ends_with(&cause.to_string()), "{err}");
    }

    #[test]
    fn prepare_refuses_relative_and_duplicate() {
        let mut g = grants(Path::new("relative/dir"), "/data");
        assert!(Filesystem.prepare(&mut g, &load()).is_err());
        let tmp = tempfile::tempdir().expect("tempdir");
        let mut g = grants(tmp.path(), "/data");
        g.filesystem.push(g.filesystem[0].clone());
        assert!(
            Filesystem
                .prepare(&mut g, &load())
                .unwrap_err()
                .to_string()
                .contains("twice")
        );
    }
}
