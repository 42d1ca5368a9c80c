//! The main file's sections read once at start, judged as the next start will judge them.
//!
//! A running daemon keeps the values of these sections it started with (see
//! [`READ_ONCE_SECTIONS`]); an edit of them takes effect at the next start. The parse of the
//! main file already refuses every value that is wrong on its face (a range, a URL's scheme,
//! `runtime.max_instances: 0`, …). What is left is what only the start finds out, from the
//! machine: a secret reference that does not resolve, a URL that does not parse once
//! resolved, a folder that cannot be made or listed, a home-cluster kubeconfig that cannot be
//! read. [`judge`] finds those for the sections an edit changed, with no side effect: it
//! makes no folder, opens no pool or store, builds no client and sends no request. A live
//! edit it refuses is refused whole, as any broken main file is, so the next start does not
//! fail on a file the running daemon took.
//!
//! Not judged here, because only the start itself can tell: whether a database or the home
//! cluster answers, and whether `telemetry.listen` can be bound (the running daemon may hold
//! the port).

use std::path::{Path, PathBuf};

use jobrelay_capabilities::archive::{ArchiveLocation, ArchiveStore};
use jobrelay_capabilities::open_error::{OpenError, chain};
use jobrelay_capabilities::sql::Databases;
use jobrelay_contract::secret::{self, SecretError};
use jobrelay_coordination::HomeError;
use jobrelay_state::StateBackend;

use super::main_file::{MainConfig, READ_ONCE_SECTIONS};

/// The start of the name of the temporary file that proves a folder writable: the folder
/// watch takes no event of it for a change of the config.
pub const PROBE_PREFIX: &str = ".jobrelay-check-";

/// Why the next start would refuse a read-once section; each message starts with the field
/// and carries its causes (the whole text is what `/status` and the log show).
#[derive(Debug, thiserror::Error)]
pub enum NextStartError {
    /// `sql` or `archive.s3`: what opening the plugins' services refuses.
    #[error("{}", chain(.0))]
    Services(OpenError),
    /// `state.url` is a secret reference that does not resolve.
    #[error("state.url: {0}")]
    StateSecret(SecretError),
    /// `state.url`, resolved, is not a MySQL URL. The parser's own message is not kept: it
    /// can quote the URL, password included.
    #[error("state.url: {0}")]
    StateUrl(&'static str),
    /// The SQLite state file cannot be made where `state.path` says.
    #[error("state.path: {0}")]
    StateFile(FolderError),
    /// The local archive folder cannot be made.
    #[error("archive.local: {0}")]
    ArchiveFolder(FolderError),
    /// The home cluster's credentials (`coordination.kubeconfig`, or the service account)
    /// cannot be read.
    #[error("{}", chain(.0))]
    Coordination(HomeError),
    /// `clusters_dir` or `plugin_manifests_dir` names something that cannot be listed.
    #[error("{field}: cannot list `{}`: {error}", path.display())]
    Folder {
        field: &'static str,
        path: PathBuf,
        error: std::io::Error,
    },
}

/// Why a file or folder cannot be made at a path.
#[derive(Debug, thiserror::Error)]
pub enum FolderError {
    #[error("{} is not a folder", .0.display())]
    NotAFolder(PathBuf),
    #[error("{} is a folder, not a file", .0.display())]
    NotAFile(PathBuf),
    #[error("no folder of {} exists", .0.display())]
    NoFolder(PathBuf),
    #[error("cannot look at {}: {error}", path.display())]
    Look {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("cannot write in {}: {error}", path.display())]
    Write {
        path: PathBuf,
        error: std::io::Error,
    },
}

/// Judges the read-once `sections` of `main` (names of [`READ_ONCE_SECTIONS`]) as the next
/// start would, in the order of that list; the first refusal is returned.
pub fn judge(main: &MainConfig, sections: &[&str]) -> Result<(), NextStartError> {
    for section in READ_ONCE_SECTIONS.iter().filter(|s| sections.contains(s)) {
        match *section {
            "state" => state(&main.state)?,
            "coordination" => jobrelay_coordination::home::check(&main.coordination)
                .map_err(NextStartError::Coordination)?,
            "sql" => Databases::check(&main.sql).map_err(NextStartError::Services)?,
            "archive" => match &main.archive {
                ArchiveLocation::Local(dir) => {
                    creatable_folder(dir).map_err(NextStartError::ArchiveFolder)?
                }
                ArchiveLocation::S3(s3) => {
                    ArchiveStore::check_s3(s3).map_err(NextStartError::Services)?
                }
            },
            "clusters_dir" => listable("clusters_dir", &main.clusters_dir)?,
            "plugin_manifests_dir" => listable("plugin_manifests_dir", &main.plugin_manifests_dir)?,
            // `runtime`, `telemetry`, `oci`, `event_memory_mb`: all the start refuses of them
            // the parse refuses already.
            _ => {}
        }
    }
    Ok(())
}

/// The state store as the start opens it, up to the connection: an SQLite file that exists
/// (it is opened at start; here it is not), or one whose folder can be made and written; a
/// MySQL URL whose secret resolves and which parses.
fn state(backend: &StateBackend) -> Result<(), NextStartError> {
    match backend {
        StateBackend::Sqlite(path) => {
            match std::fs::metadata(path) {
                Ok(meta) if meta.is_dir() => {
                    return Err(NextStartError::StateFile(FolderError::NotAFile(
                        path.clone(),
                    )));
                }
                Ok(_) => return Ok(()),
                Err(_) => {}
            }
            writable_folder(path).map_err(NextStartError::StateFile)
        }
        StateBackend::MySql { url, .. } => {
            let url = secret::resolve(url).map_err(NextStartError::StateSecret)?;
            let url = url.trim();
            let url = match url.strip_prefix("mariadb:") {
                Some(rest) => format!("mysql:{rest}"),
                None => url.to_string(),
            };
            if !url.starts_with("mysql://") {
                return Err(NextStartError::StateUrl(
                    "must be a mysql:// or mariadb:// URL (or an env:/file: secret reference to \
                     one)",
                ));
            }
            <sqlx::mysql::MySqlConnectOptions as std::str::FromStr>::from_str(&url)
                .map(drop)
                .map_err(|_| NextStartError::StateUrl("not a valid mysql:// URL"))
        }
    }
}

/// A folder the start lists: absent (nothing in it yet) or a folder it can read.
fn listable(field: &'static str, dir: &Path) -> Result<(), NextStartError> {
    match std::fs::read_dir(dir) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(error) => Err(NextStartError::Folder {
            field,
            path: dir.to_path_buf(),
            error,
        }),
    }
}

/// A folder the start creates if missing: there already, or the nearest folder above it is
/// one that can be written, so the start can make the rest. Nothing is made.
fn creatable_folder(dir: &Path) -> Result<(), FolderError> {
    let nearest = nearest_folder(dir)?;
    if nearest == dir {
        return Ok(());
    }
    probe_write(&nearest)
}

/// Whether the file `path` can be made: its folder is there and writable, or the nearest
/// folder above it is, so the daemon can make the rest. Proven by writing a temporary file
/// there, removed at once (`jobrelay check` judges the state file's folder the same way).
pub fn writable_folder(path: &Path) -> Result<(), FolderError> {
    let parent = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let nearest = nearest_folder(parent)?;
    probe_write(&nearest)
}

/// `dir`, or the nearest folder above it that exists; an error if that is not a folder.
fn nearest_folder(dir: &Path) -> Result<PathBuf, FolderError> {
    let mut at = dir;
    loop {
        match std::fs::metadata(at) {
            Ok(meta) if meta.is_dir() => return Ok(at.to_path_buf()),
            Ok(_) => return Err(FolderError::NotAFolder(at.to_path_buf())),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                ) =>
            {
                match at.parent() {
                    Some(up) if !up.as_os_str().is_empty() => at = up,
                    _ => return Err(FolderError::NoFolder(dir.to_path_buf())),
                }
            }
            Err(error) => {
                return Err(FolderError::Look {
                    path: at.to_path_buf(),
                    error,
                });
            }
        }
    }
}

/// Written for real (a temporary file, removed at once): permissions, a read-only mount and a
/// full disk all say so here.
fn probe_write(dir: &Path) -> Result<(), FolderError> {
    tempfile::Builder::new()
        .prefix(PROBE_PREFIX)
        .tempfile_in(dir)
        .map(drop)
        .map_err(|error| FolderError::Write {
            path: dir.to_path_buf(),
            error,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str, root: &Path) -> MainConfig {
        MainConfig::parse(text, root).expect("parses")
    }

    #[test]
    fn every_read_once_section_is_told_apart_by_read_once_changes() {
        let root = Path::new("/cfg");
        let base = parse("{}", root);
        for (section, text) in [
            ("runtime", "runtime: {max_instances: 8}"),
            ("state", "state: {path: /var/lib/jobrelay/other.db}"),
            ("coordination", "coordination: {lease_name: other}"),
            ("sql", "sql: {connections: {db: {url: \"sqlite:///x.db\"}}}"),
            ("archive", "archive: {local: other}"),
            ("telemetry", "telemetry: {listen: \"127.0.0.1:9999\"}"),
            ("oci", "oci: {plain_http: [\"registry:5000\"]}"),
            ("event_memory_mb", "event_memory_mb: 64"),
            ("clusters_dir", "clusters_dir: other-clusters"),
            (
                "plugin_manifests_dir",
                "plugin_manifests_dir: other-plugins",
            ),
        ] {
            assert_eq!(
                base.read_once_changes(&parse(text, root)),
                [section],
                "{text}"
            );
        }
    }

    #[test]
    fn a_file_in_the_way_refuses_state_archive_and_folders_naming_the_field() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        std::fs::write(root.join("blocker"), "a file").expect("file");
        for (section, text, field) in [
            ("state", "state: {path: blocker/state.db}", "state.path: "),
            (
                "archive",
                "archive: {local: blocker/archive}",
                "archive.local: ",
            ),
            ("clusters_dir", "clusters_dir: blocker", "clusters_dir: "),
            (
                "plugin_manifests_dir",
                "plugin_manifests_dir: blocker",
                "plugin_manifests_dir: ",
            ),
        ] {
            let why = judge(&parse(text, root), &[section]).expect_err(text);
            assert!(why.to_string().starts_with(field), "{text}: {why}");
        }
        std::fs::create_dir(root.join("state.db")).expect("folder");
        let why = judge(&parse("state: {path: state.db}", root), &["state"]).expect_err("dir");
        assert!(why.to_string().contains("is a folder, not a file"), "{why}");
        // What can be made is not made.
        judge(
            &parse(
                "state: {path: new/state.db}\narchive: {local: new/archive}\n\
                 clusters_dir: new/clusters",
                root,
            ),
            &READ_ONCE_SECTIONS,
        )
        .expect("all can be made");
        assert!(!root.join("new").exists());
    }

    #[test]
    fn secrets_that_do_not_resolve_refuse_sql_state_and_s3_naming_the_field() {
        let root = Path::new("/cfg");
        let missing = "env:JOBRELAY_TEST_READ_ONCE_NEVER_SET";
        for (section, text, field) in [
            (
                "sql",
                format!("sql: {{connections: {{db: {{url: \"{missing}\"}}}}}}"),
                "sql.connections.db: url: ",
            ),
            (
                "state",
                format!("state: {{url: \"{missing}\"}}"),
                "state.url: ",
            ),
            (
                "archive",
                format!("archive: {{s3: {{bucket: b, access_key_id: \"{missing}\"}}}}"),
                "archive.s3.access_key_id: ",
            ),
        ] {
            let why = judge(&parse(&text, root), &[section]).expect_err(&text);
            assert!(why.to_string().starts_with(field), "{text}: {why}");
            assert!(
                why.to_string()
                    .contains("JOBRELAY_TEST_READ_ONCE_NEVER_SET"),
                "{why}"
            );
        }
    }
}
