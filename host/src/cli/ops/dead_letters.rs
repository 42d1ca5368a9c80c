//! `jobrelay dead-letters list | replay | drop`: the operator's view of the dead-letter list.
//!
//! These run in their own process beside a running daemon, on the same state file. `replay`
//! does not deliver anything itself: it marks dead letters, and the daemon's lane for each
//! plugin takes the marked ones within a few seconds and delivers them again. That keeps one
//! deliverer (the daemon, with its limits, ordering and cursors) instead of two.
//!
//! Each function returns the text to print, so the output can be tested without a terminal;
//! `replay` and `drop` also say whether every id they were given existed (the command exits 1
//! when not: an operator usually copied the ids from a listing, and a script must notice).

use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::Subcommand;

use crate::config::state::ConfigState;
use jobrelay_state::{DeadLetter, DeliveryStore};

/// Longest error text shown in the table; `--json` has the whole of it.
const ERROR_WIDTH: usize = 100;

/// The `dead-letters` subcommands.
#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum DeadLettersCommand {
    /// List dead letters, oldest first.
    List {
        /// Only this plugin's.
        #[arg(long)]
        plugin: Option<String>,
        /// One JSON object per line, with the whole event and error.
        #[arg(long)]
        json: bool,
    },
    /// Mark dead letters for replay; the running daemon delivers them again.
    Replay {
        /// Only this plugin's (given ids of other plugins are left alone).
        #[arg(long)]
        plugin: Option<String>,
        /// Every dead letter (of --plugin, if given).
        #[arg(long, conflicts_with = "ids")]
        all: bool,
        /// Dead-letter ids (the SEQ column of `list`).
        ids: Vec<i64>,
    },
    /// Delete dead letters for good.
    Drop {
        /// Only this plugin's (given ids of other plugins are left alone).
        #[arg(long)]
        plugin: Option<String>,
        /// Every dead letter (of --plugin, if given).
        #[arg(long, conflicts_with = "ids")]
        all: bool,
        /// Dead-letter ids (the SEQ column of `list`).
        ids: Vec<i64>,
    },
}

/// What a subcommand did: the text to print, and whether some ids it was given matched no
/// dead letter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Done {
    pub text: String,
    pub missing: bool,
}

/// `jobrelay dead-letters …` as the binary runs it: opens the state store the config folder
/// names, runs the subcommand and prints its text; exit status 1 when some given ids matched
/// no dead letter.
pub async fn command(
    config: Option<&Path>,
    command: &DeadLettersCommand,
) -> anyhow::Result<ExitCode> {
    let Some(config) = config else {
        bail!("dead-letters needs the config folder: --config DIR (or JOBRELAY_CONFIG)");
    };
    let (state, _) = ConfigState::load(config)
        .map_err(|(path, e)| anyhow::anyhow!("{}: {e}", path.display()))?;
    let store = jobrelay_state::open_store(&state.main().state).await?;
    let out = run(store.as_ref(), command).await;
    store.close().await;
    let done = out?;
    stdout(&done.text)?;
    Ok(crate::cli::passed(!done.missing))
}

/// Writes `text` to standard output. A reader that went away (`jobrelay dead-letters list |
/// head`) is not an error: what it wanted, it got.
fn stdout(text: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// Runs one subcommand on an opened store.
pub async fn run(store: &dyn DeliveryStore, command: &DeadLettersCommand) -> anyhow::Result<Done> {
    match command {
        DeadLettersCommand::List { plugin, json } => Ok(Done {
            text: list(store, plugin.as_deref(), *json).await?,
            missing: false,
        }),
        DeadLettersCommand::Replay { plugin, all, ids } => {
            replay(store, plugin.as_deref(), ids, *all).await
        }
        DeadLettersCommand::Drop { plugin, all, ids } => {
            drop(store, plugin.as_deref(), ids, *all).await
        }
    }
}

/// The dead letters as a table (seq, plugin, event id, phase, attempts, time, replay marker,
/// first line of the error), or as JSON lines with `json`.
pub async fn list(
    store: &dyn DeliveryStore,
    plugin: Option<&str>,
    json: bool,
) -> anyhow::Result<String> {
    let letters = store.dead_letters(plugin).await?;
    if json {
        let mut out = String::new();
        for letter in &letters {
            let line = serde_json::to_string(letter)
                .with_context(|| format!("cannot write dead letter {} as JSON", letter.seq))?;
            out.push_str(&line);
            out.push('\n');
        }
        return Ok(out);
    }
    if letters.is_empty() {
        return Ok(match plugin {
            Some(p) => format!("no dead letters for plugin `{p}`\n"),
            None => "no dead letters\n".to_owned(),
        });
    }
    Ok(table(&letters))
}

/// Marks dead letters for replay; refuses to guess when given neither ids nor `all`.
pub async fn replay(
    store: &dyn DeliveryStore,
    plugin: Option<&str>,
    ids: &[i64],
    all: bool,
) -> anyhow::Result<Done> {
    check_selection(ids, all)?;
    let n = store.request_replay(plugin, ids, all).await?;
    let out = format!(
        "{} marked for replay; the running daemon picks them up within a few seconds",
        count(n)
    );
    Ok(done(out, n, ids, plugin))
}

/// Deletes dead letters; refuses to guess when given neither ids nor `all`.
pub async fn drop(
    store: &dyn DeliveryStore,
    plugin: Option<&str>,
    ids: &[i64],
    all: bool,
) -> anyhow::Result<Done> {
    check_selection(ids, all)?;
    let n = store.drop_dead_letters(plugin, ids, all).await?;
    Ok(done(format!("{} dropped", count(n)), n, ids, plugin))
}

/// `text`, with a note of the given ids that matched nothing.
fn done(mut text: String, matched: u64, ids: &[i64], plugin: Option<&str>) -> Done {
    let note = missing_note(matched, ids, plugin);
    text.push_str(&note);
    text.push('\n');
    Done {
        text,
        missing: !note.is_empty(),
    }
}

/// Stricter than the store: even with `--plugin`, selecting a whole plugin needs `--all`, so
/// a forgotten id list never drops a plugin's dead letters by accident.
fn check_selection(ids: &[i64], all: bool) -> anyhow::Result<()> {
    if ids.is_empty() && !all {
        bail!(
            "no dead letters selected: give their ids (see `jobrelay dead-letters list`), or --all \
             (with --plugin to limit it to one plugin)"
        );
    }
    if !ids.is_empty() && all {
        bail!("give either dead-letter ids or --all, not both");
    }
    Ok(())
}

fn count(n: u64) -> String {
    if n == 1 {
        "1 dead letter".to_owned()
    } else {
        format!("{n} dead letters")
    }
}

/// Says so when some of the given ids matched nothing, since an operator usually copied them
/// from a listing and expects each to exist.
fn missing_note(matched: u64, ids: &[i64], plugin: Option<&str>) -> String {
    let mut unique = ids.to_vec();
    unique.sort_unstable();
    unique.dedup();
    let asked = unique.len() as u64;
    if ids.is_empty() || matched >= asked {
        return String::new();
    }
    let missing = asked - matched;
    match plugin {
        Some(p) => {
            format!(" ({missing} of the {asked} ids do not exist or do not belong to plugin `{p}`)")
        }
        None => format!(" ({missing} of the {asked} ids do not exist)"),
    }
}

fn table(letters: &[DeadLetter]) -> String {
    let header = [
        "SEQ", "PLUGIN", "JOB", "EVENT", "PHASE", "ATTEMPTS", "AT", "REPLAY", "ERROR",
    ];
    let rows: Vec<[String; 9]> = letters
        .iter()
        .map(|l| {
            [
                l.seq.to_string(),
                one_line(&l.plugin, usize::MAX),
                // The job as people name it: the event id's uid says nothing to them.
                one_line(
                    &format!("{}/{}/{}", l.event.cluster, l.event.namespace, l.event.name),
                    usize::MAX,
                ),
                one_line(&l.event.id, usize::MAX),
                l.event.phase.to_string(),
                l.attempts.to_string(),
                l.at.clone(),
                if l.replay_requested {
                    "requested".to_owned()
                } else {
                    "-".to_owned()
                },
                one_line(&l.error, ERROR_WIDTH),
            ]
        })
        .collect();
    let mut widths = header.map(|h| h.chars().count());
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &[&str]| {
        let mut text = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                text.push_str(cell);
            } else {
                // Writing to a String cannot fail.
                let _ = write!(text, "{cell:<width$}  ", width = widths[i]);
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(&header);
    for row in &rows {
        let cells: Vec<&str> = row.iter().map(String::as_str).collect();
        line(&cells);
    }
    out
}

/// The first line of `text`, cut to `max` characters with an ellipsis, with control
/// characters (which could garble the terminal) replaced.
fn one_line(text: &str, max: usize) -> String {
    let first = text.lines().next().unwrap_or("").trim_end();
    let more_lines = text.trim_end().lines().nth(1).is_some();
    let mut out: String = first
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .take(max)
        .collect();
    if more_lines || first.chars().count() > max {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_cuts_and_marks() {
        assert_eq!(one_line("short", 10), "short");
        assert_eq!(one_line("first\nsecond", 10), "first…");
        assert_eq!(one_line("abcdefghijkl", 5), "abcde…");
        assert_eq!(one_line("tab\there", 20), "tab?here");
        assert_eq!(one_line("", 5), "");
    }

    #[test]
    fn selection_needs_ids_or_all() {
        assert!(check_selection(&[], false).is_err());
        assert!(check_selection(&[1], true).is_err());
        assert!(check_selection(&[1], false).is_ok());
        assert!(check_selection(&[], true).is_ok());
    }

    #[test]
    fn missing_ids_are_reported() {
        assert_eq!(missing_note(2, &[1, 2], None), "");
        assert_eq!(missing_note(5, &[], None), "");
        assert_eq!(
            missing_note(1, &[1, 2, 2], Some("p")),
            " (1 of the 2 ids do not exist or do not belong to plugin `p`)"
        );
    }
}
