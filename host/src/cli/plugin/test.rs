//! `jobrelay plugin test DIR --wasm FILE [--manifest FILE] [--update] [--all]`: a plugin's
//! recorded cases run as a suite, offline, for the plugin's own CI.
//!
//! Each folder of DIR is one case (run in name order):
//!
//! - `events.jsonl` — the events, in order (the format of `plugin run --event`);
//! - `tape.jsonl` — the capability calls the plugin must make and the answers it gets, as
//!   `plugin run --record` writes them; without it, the plugin must make none;
//! - `expect.yaml` — `outcomes:`, one status per event (`ok`, `retry`, `give_up`, `trap`,
//!   `timeout`, `memory_limit`, `init_refused`, or `skipped` for an event the daemon would not
//!   deliver to the plugin by its manifest's kinds, filter and delivery, which is not called
//!   with it — see `super::selection`; `--all` calls it with every event); optionally
//!   `calls:`, assertions on the calls made (see `expect_calls`), and `tape: answers` to
//!   compare the tape's calls by name and order only, not their arguments;
//! - `manifest.yaml`, optional — the case's own manifest, else `--manifest`, else the one
//!   beside the component.
//!
//! A case passes when every call ended as expected and the replay matched its tape: every
//! call made was the tape's next one, with the same arguments, and every recorded call was
//! made. A case that cannot run (a missing file, a plugin that does not load) fails; the
//! suite goes on with the next.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, bail};
use serde::Deserialize;

use super::expect_calls::ExpectCall;
use super::outcomes_edit::rewrite_outcomes;
use super::run::{PluginRunArgs, PluginRunOutcome, SKIPPED, read_events, run_events};
use jobrelay_capabilities::tape::{self, Tape, TapeFile};
use jobrelay_runtime::CallError;

/// Whether `status` is one a call can end with (see `CallOutcome::status`).
fn is_status(status: &str) -> bool {
    status == "ok" || status == SKIPPED || CallError::KINDS.contains(&status)
}

/// Every status, for messages: `ok, skipped, retry, …`.
fn statuses() -> String {
    format!("ok, {SKIPPED}, {}", CallError::KINDS.join(", "))
}

/// `plugin test`'s command line: the suite, and whether to call every event (`--all`).
#[derive(Debug, Clone, clap::Args)]
pub struct PluginTestCommand {
    #[command(flatten)]
    pub suite: PluginTestArgs,
    /// Call the plugin with every event of a case, also those the daemon would not deliver to
    /// it by the manifest's kinds, filter and delivery (which end as `skipped` otherwise).
    #[arg(long)]
    pub all: bool,
}

/// Arguments of `plugin test`.
#[derive(Debug, Clone, clap::Args)]
pub struct PluginTestArgs {
    /// The folder of cases: one folder per case holding events.jsonl, expect.yaml and, if the
    /// plugin makes capability calls, tape.jsonl.
    pub dir: PathBuf,
    /// The plugin component (.wasm).
    #[arg(long)]
    pub wasm: PathBuf,
    /// The manifest of every case without its own manifest.yaml. Default: NAME.yaml beside the
    /// component NAME.wasm, if it exists.
    #[arg(long)]
    pub manifest: Option<PathBuf>,
    /// Rewrite each case that fails to what the plugin does now, and say what changed (each
    /// outcome on standard error: `case C: event N (ID): retry -> ok`); a case that passes is
    /// left as it is. Calls whose arguments changed keep their recorded answers, recorded calls
    /// it no longer makes are dropped, outcomes are taken as they came, but for one the case's
    /// own run confirmed: if it comes out otherwise, the case is left as it was. expect.yaml
    /// is edited in place (its comments stay). A call the tape has no answer for (another
    /// call, one more) cannot be updated offline: record the case again.
    #[arg(long)]
    pub update: bool,
}

/// `expect.yaml`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Expect {
    /// One status per event, in order.
    outcomes: Vec<String>,
    /// What the tape is compared for: every call's arguments (`exact`, the default), or only
    /// which calls are made in which order, the tape giving their answers (`answers`).
    #[serde(default)]
    tape: TapeUse,
    /// Assertions on the calls made (see `expect_calls`).
    #[serde(default)]
    calls: Vec<ExpectCall>,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum TapeUse {
    #[default]
    Exact,
    Answers,
}

/// How one case went.
#[derive(Debug, Clone)]
pub struct CaseResult {
    pub name: String,
    pub events: usize,
    /// Events the plugin was not called with: the daemon would not deliver them.
    pub skipped: usize,
    pub host_calls: usize,
    /// Empty when the case passed.
    pub failures: Vec<String>,
    /// With `--update`: what was rewritten, one line each.
    pub updated: Vec<String>,
    /// With `--update`: each outcome rewritten, `event 2 (ID): retry -> ok`, said on standard
    /// error whatever the report's form, so no expectation changes unseen.
    pub outcome_changes: Vec<String>,
}

impl CaseResult {
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }
}

/// How the suite went.
#[derive(Debug, Clone)]
pub struct SuiteResult {
    pub cases: Vec<CaseResult>,
}

impl SuiteResult {
    pub fn passed(&self) -> bool {
        self.cases.iter().all(CaseResult::passed)
    }
}

impl fmt::Display for SuiteResult {
    /// `ok   CASE (N events, M host calls)` or `FAIL CASE` with each reason below it, then a
    /// count.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for case in &self.cases {
            if case.passed() && !case.updated.is_empty() {
                writeln!(f, "upd  {}", case.name)?;
                for change in &case.updated {
                    writeln!(f, "  {change}")?;
                }
            } else if case.passed() {
                let skipped = match case.skipped {
                    0 => String::new(),
                    n => format!(", {n} {SKIPPED}"),
                };
                writeln!(
                    f,
                    "ok   {} ({} events{skipped}, {} host calls)",
                    case.name, case.events, case.host_calls
                )?;
            } else {
                writeln!(f, "FAIL {}", case.name)?;
                for failure in &case.failures {
                    writeln!(f, "  {failure}")?;
                }
            }
        }
        let failed = self.cases.iter().filter(|c| !c.passed()).count();
        let cases = match self.cases.len() {
            1 => "1 case".to_string(),
            n => format!("{n} cases"),
        };
        write!(
            f,
            "{cases}: {} passed, {failed} failed",
            self.cases.len() - failed
        )
    }
}

/// `jobrelay plugin test` as the binary runs it: prints the suite; exit status 1 if a case
/// failed.
pub async fn command(args: &PluginTestCommand) -> anyhow::Result<ExitCode> {
    let suite = plugin_test_events(&args.suite, args.all).await?;
    for case in &suite.cases {
        for change in &case.outcome_changes {
            eprintln!("case {}: {change}", case.name);
        }
    }
    super::print_out(&format!("{suite}\n"))?;
    Ok(crate::cli::passed(suite.passed()))
}

/// Runs every case of `args.dir`, each event the daemon would not deliver to the plugin
/// skipped. Errors: a folder that cannot be listed or holds no case.
pub async fn plugin_test(args: &PluginTestArgs) -> anyhow::Result<SuiteResult> {
    plugin_test_events(args, false).await
}

/// [`plugin_test`], with `all`: the plugin called with every event (`--all`).
pub async fn plugin_test_events(args: &PluginTestArgs, all: bool) -> anyhow::Result<SuiteResult> {
    let mut folders: Vec<PathBuf> = std::fs::read_dir(&args.dir)
        .with_context(|| format!("cannot list the cases in {}", args.dir.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.is_dir())
        .collect();
    folders.sort();
    if folders.is_empty() {
        bail!(
            "{}: no case in it (one folder per case)",
            args.dir.display()
        );
    }
    let mut cases = Vec::with_capacity(folders.len());
    for folder in folders {
        let name = folder
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let result = match run_case(args, &folder, all).await {
            Ok(mut result) => {
                result.name = name;
                result
            }
            Err(error) => CaseResult {
                name,
                events: 0,
                skipped: 0,
                host_calls: 0,
                failures: vec![format!("{error:#}")],
                updated: Vec::new(),
                outcome_changes: Vec::new(),
            },
        };
        cases.push(result);
    }
    Ok(SuiteResult { cases })
}

async fn run_case(args: &PluginTestArgs, folder: &Path, all: bool) -> anyhow::Result<CaseResult> {
    let expect_file = folder.join("expect.yaml");
    let text = std::fs::read_to_string(&expect_file)
        .with_context(|| format!("cannot read {}", expect_file.display()))?;
    let expect: Expect = serde_yaml_ng::from_str(&text)
        .with_context(|| format!("{}: not an expectation", expect_file.display()))?;
    if let Some(unknown) = expect.outcomes.iter().find(|o| !is_status(o)) {
        bail!(
            "{}: `{unknown}` is not a status (one of {})",
            expect_file.display(),
            statuses()
        );
    }
    let events = read_events(&folder.join("events.jsonl"))?;
    let tape_file = folder.join("tape.jsonl");
    let recorded = if tape_file.exists() {
        tape::read_file(&tape_file)?
    } else {
        TapeFile {
            clock: std::time::Duration::ZERO,
            entries: Vec::new(),
        }
    };
    let own_manifest = folder.join("manifest.yaml");
    let run = PluginRunArgs {
        manifest: if own_manifest.exists() {
            Some(own_manifest)
        } else {
            args.manifest.clone()
        },
        all,
        ..PluginRunArgs::new(args.wasm.clone(), folder.join("events.jsonl"))
    };
    // The case as it is, first, also with `--update`: a case that passes is not rewritten.
    let tape = Arc::new(match expect.tape {
        TapeUse::Answers => Tape::answers_only(recorded.clone()),
        TapeUse::Exact => Tape::player(recorded.clone()),
    });
    let tested = run_events(&run, &events, tape).await?;
    let result = judge(&expect, &expect_file, &tested);
    if !args.update || result.passed() {
        return Ok(result);
    }
    let tape = Arc::new(Tape::updater(recorded));
    let again = run_events(&run, &events, tape.clone()).await?;
    let mut result = update_case(folder, &text, &tape, &tested, &again, &expect.outcomes)?;
    result
        .failures
        .extend(broken_calls(&expect, &expect_file, &again));
    Ok(result)
}

/// The case's `calls:` assertions that the run's calls break, each naming the file.
fn broken_calls(expect: &Expect, file: &Path, outcome: &PluginRunOutcome) -> Vec<String> {
    let made = outcome.tape();
    expect
        .calls
        .iter()
        .enumerate()
        .filter_map(|(index, assertion)| assertion.check(&made, index))
        .map(|why| format!("{}: {why}", file.display()))
        .collect()
}

/// How the run went against the case: each outcome, the tape, the assertions.
fn judge(expect: &Expect, file: &Path, outcome: &PluginRunOutcome) -> CaseResult {
    let mut failures = Vec::new();
    if expect.outcomes.len() != outcome.calls.len() {
        failures.push(format!(
            "expect.yaml lists {} outcomes for {} events",
            expect.outcomes.len(),
            outcome.calls.len()
        ));
    }
    for (index, (call, expected)) in outcome.calls.iter().zip(&expect.outcomes).enumerate() {
        if call.status() != expected {
            let why = match (&call.skipped, &call.result) {
                (Some(skip), _) => format!(": {skip}"),
                (None, Err(e)) => format!(": {e}"),
                (None, Ok(())) => String::new(),
            };
            failures.push(format!(
                "event {} ({}): expected {expected}, got {}{why}",
                index + 1,
                call.event_id,
                call.status()
            ));
        }
    }
    failures.extend(
        outcome
            .divergences
            .iter()
            .map(|d| format!("diverged from the tape: {d}")),
    );
    failures.extend(broken_calls(expect, file, outcome));
    CaseResult {
        name: String::new(),
        events: outcome.calls.len(),
        skipped: outcome.skipped(),
        host_calls: outcome.tape().len(),
        failures,
        updated: Vec::new(),
        outcome_changes: Vec::new(),
    }
}

/// How many of a run's first events ended before its first divergence: their outcomes came
/// from the tape's answers, where a later event's may have come from the divergence's error.
fn before_divergence(outcome: &PluginRunOutcome) -> usize {
    let Some(first) = outcome.divergences.iter().map(|d| d.position).min() else {
        return outcome.calls.len();
    };
    let mut made = outcome.load_calls.len();
    if first <= made {
        return 0;
    }
    for (index, call) in outcome.calls.iter().enumerate() {
        made += call.host_calls.len();
        if first <= made {
            return index;
        }
    }
    outcome.calls.len() // a recorded call not made: every call had the tape's answers
}

/// `--update` of a case that failed: its tape and its outcomes rewritten to what the update
/// run did, unless it diverged in a way only a new recording can answer, or it would change
/// an outcome the case's own run confirmed (one that matched, before any divergence) — the
/// two runs then disagree, and neither is written. Says what changed; `expect.yaml` is
/// edited in place (its comments stay, see `outcomes_edit`).
fn update_case(
    folder: &Path,
    text: &str,
    tape: &Tape,
    tested: &PluginRunOutcome,
    again: &PluginRunOutcome,
    expected: &[String],
) -> anyhow::Result<CaseResult> {
    let mut result = CaseResult {
        name: String::new(),
        events: again.calls.len(),
        skipped: again.skipped(),
        host_calls: again.tape().len(),
        failures: Vec::new(),
        updated: Vec::new(),
        outcome_changes: Vec::new(),
    };
    if let Some(divergence) = again.divergences.first() {
        result.failures.push(format!(
            "cannot update: diverged from the tape: {divergence} — the tape has no answer for \
             that call; record the case again (plugin run --record)"
        ));
        return Ok(result);
    }
    let now: Vec<&str> = again.calls.iter().map(|c| c.status()).collect();
    let confirmed = before_divergence(tested);
    for (index, (call, want)) in tested
        .calls
        .iter()
        .zip(expected)
        .enumerate()
        .take(confirmed)
    {
        let then = now.get(index).copied().unwrap_or("(none)");
        if call.status() == want && then != want {
            result.failures.push(format!(
                "cannot update: event {} ({}) ends {want} as the case expects, but {then} \
                 with the tape updated; the case is left as it was",
                index + 1,
                call.event_id
            ));
        }
    }
    if !result.failures.is_empty() {
        return Ok(result);
    }
    let changes = tape.changes();
    if !changes.is_empty() {
        let file = folder.join("tape.jsonl");
        tape::write_file(&file, &tape.file())
            .with_context(|| format!("cannot write {}", file.display()))?;
        result
            .updated
            .extend(changes.into_iter().map(|c| format!("tape.jsonl: {c}")));
    }
    if now != expected {
        let file = folder.join("expect.yaml");
        let edited = rewrite_outcomes(text, &now)
            .with_context(|| format!("{}: cannot rewrite its outcomes", file.display()))?;
        std::fs::write(&file, edited)
            .with_context(|| format!("cannot write {}", file.display()))?;
        result.updated.push(format!(
            "expect.yaml: outcomes were [{}], now [{}]",
            expected.join(", "),
            now.join(", ")
        ));
        for index in 0..now.len().max(expected.len()) {
            let old = expected.get(index).map_or("(none)", String::as_str);
            let new = now.get(index).copied().unwrap_or("(none)");
            if old != new {
                let id = again
                    .calls
                    .get(index)
                    .map(|c| format!(" ({})", c.event_id))
                    .unwrap_or_default();
                result
                    .outcome_changes
                    .push(format!("event {}{id}: {old} -> {new}", index + 1));
            }
        }
    }
    Ok(result)
}
