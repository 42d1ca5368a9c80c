//! `jobrelay state backup`: a consistent copy of the SQLite state file, taken beside a
//! running daemon (see `jobrelay_state::backup` for why a copy of the file is not one).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use clap::Subcommand;

use crate::config::state::ConfigState;
use jobrelay_state::StateBackend;
use jobrelay_state::backup::backup_sqlite;

#[derive(Debug, Subcommand)]
pub enum StateCommand {
    /// Write a consistent copy of the SQLite state file to OUT (a new file; `-`: standard
    /// output, for `kubectl exec … > state.db`), beside a running daemon. A MySQL or MariaDB
    /// store is backed up with the database's own tools (docs/operations.md).
    Backup {
        /// The new file to write, or `-` for standard output.
        out: PathBuf,
    },
}

/// `jobrelay state …` as the binary runs it.
pub fn command(config: Option<&Path>, command: &StateCommand) -> anyhow::Result<ExitCode> {
    let Some(config) = config else {
        bail!("state needs the config folder: --config DIR (or JOBRELAY_CONFIG)");
    };
    let (state, _) = ConfigState::load(config)
        .map_err(|(path, e)| anyhow::anyhow!("{}: {e}", path.display()))?;
    let StateCommand::Backup { out } = command;
    let db = match &state.main().state {
        StateBackend::Sqlite(path) => path.clone(),
        other => bail!(
            "state backup copies an SQLite state file; {other} is backed up with the \
             database's own tools (mysqldump or mariadb-dump of the tables with its prefix, \
             see docs/operations.md)"
        ),
    };
    if out.as_os_str() != "-" {
        let bytes = backup_sqlite(&db, out)?;
        eprintln!(
            "backed up {} into {} ({bytes} bytes)",
            db.display(),
            out.display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    // To standard output: written beside the state first (the same file system, which has
    // room for the state), then streamed, then removed.
    let staging = tempfile::Builder::new()
        .prefix(".jobrelay-backup-")
        .tempdir_in(db.parent().unwrap_or(Path::new(".")))
        .context("a folder for the backup beside the state file")?;
    let copy = staging.path().join("state.db");
    backup_sqlite(&db, &copy)?;
    let mut file = std::fs::File::open(&copy).context("the backup just written")?;
    let mut stdout = std::io::stdout().lock();
    std::io::copy(&mut file, &mut stdout).context("writing the backup to standard output")?;
    stdout
        .flush()
        .context("writing the backup to standard output")?;
    Ok(ExitCode::SUCCESS)
}
