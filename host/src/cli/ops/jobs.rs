//! `jobrelay jobs list|show`: the job view of a running daemon (docs/job-view.md), read over
//! HTTP from its telemetry address — every job of every cluster it watches, and what each
//! plugin did of it, without a kubectl context per cluster.
//!
//! The command is a client of the API, not of the state store or the clusters: the daemon
//! already holds the answer in memory, and a second reader of the clusters would double
//! their load and could disagree with what the daemon delivers.
//!
//! - [`client`] — the server's URL, request URLs, one GET with a deadline;
//! - [`answer`] — the API's answers as read here;
//! - [`table`] — `list`'s table and wide table;
//! - [`report`] — `show`'s report;
//! - [`error`] — why a command could not answer.
//!
//! [`run`] writes to the writers it is given, so the output is tested without a terminal.

pub mod answer;
pub mod client;
pub mod error;
pub mod report;
pub mod table;

use std::collections::BTreeMap;
use std::io::Write;
use std::process::ExitCode;

use clap::{Args, Subcommand, ValueEnum};
use serde_json::Value;

use self::answer::{JobItem, JobList, JobShown, Refusal};
use self::client::{Answer, query_string};
pub use self::client::{DEFAULT_SERVER, Server};
pub use self::error::JobsError;

/// The `jobs` subcommands.
#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum JobsCommand {
    /// List jobs of every watched cluster, filtered and ordered, a page at a time.
    List(Box<ListArgs>),
    /// One job: its fields, labels and transitions, what each plugin did of it call by call,
    /// and earlier deleted jobs of the same name.
    Show(ShowArgs),
}

/// `jobs list`'s filters, order, paging and output.
#[derive(Debug, Clone, Default, PartialEq, Eq, Args)]
pub struct ListArgs {
    /// Only these clusters (repeat the flag, or separate with commas).
    #[arg(long, value_name = "CLUSTER")]
    pub cluster: Vec<String>,
    /// Only these namespaces (repeat, or separate with commas).
    #[arg(long, value_name = "NAMESPACE")]
    pub namespace: Vec<String>,
    /// Only these kinds, by configured name: batch-job, volcano-job, … (repeat, or commas).
    #[arg(long, value_name = "KIND")]
    pub kind: Vec<String>,
    /// Only these phases: pending, running, restarting, suspended, succeeded, failed,
    /// terminating, deleted, unknown, queued, preempted (repeat, or commas).
    #[arg(long, value_name = "PHASE")]
    pub phase: Vec<String>,
    /// Only jobs whose labels match this Kubernetes label selector (`team=nlp,!spot`).
    #[arg(long, short = 'l', value_name = "SELECTOR")]
    pub selector: Option<String>,
    /// Only jobs whose name starts with this.
    #[arg(long, value_name = "PREFIX")]
    pub name: Option<String>,
    /// Only jobs one of these timers (`fleet.timers`) fires on; `*` for any (repeat, or
    /// commas).
    #[arg(long, value_name = "TIMER")]
    pub timer: Vec<String>,
    /// Order: cluster (default), name, created or finished; `-` in front for descending.
    #[arg(long, value_name = "ORDER", allow_hyphen_values = true)]
    pub sort: Option<String>,
    /// Jobs per page, 1 to 1000 (the daemon's default: 100; with --all: 1000).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub limit: Option<u64>,
    /// Continue after the page that gave this token (same filters and order).
    #[arg(long = "continue", value_name = "TOKEN")]
    pub continue_token: Option<String>,
    /// Follow the pages to the end and show every job that matches.
    #[arg(long)]
    pub all: bool,
    /// table, wide (more columns) or json (the API's answer).
    #[arg(long, short = 'o', value_enum, default_value_t = ListOutput::Table)]
    pub output: ListOutput,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum ListOutput {
    #[default]
    Table,
    Wide,
    Json,
}

/// `jobs show`'s job and output.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct ShowArgs {
    /// The job: CLUSTER/NAMESPACE/NAME.
    #[arg(value_name = "CLUSTER/NAMESPACE/NAME")]
    pub job: String,
    /// text (a report) or json (the API's answer).
    #[arg(long, short = 'o', value_enum, default_value_t = ShowOutput::Text)]
    pub output: ShowOutput,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum ShowOutput {
    #[default]
    Text,
    Json,
}

/// `jobrelay jobs …` as the binary runs it: on standard output and error. A job not found
/// exits 1 (the command worked, the job is not there, as `check` exits 1 on a bad file);
/// other failures are errors (exit 2). A reader that went away (`jobrelay jobs list | head`)
/// is not an error.
pub async fn command(server: &str, command: &JobsCommand) -> anyhow::Result<ExitCode> {
    let (mut out, mut err) = (std::io::stdout(), std::io::stderr());
    match run(server, command, &mut out, &mut err).await {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(JobsError::Output(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            Ok(ExitCode::SUCCESS)
        }
        Err(e @ JobsError::NotFound { .. }) => {
            // Best effort: stderr itself failing leaves only the exit status to say it.
            let _ = writeln!(err, "error: {e}");
            Ok(ExitCode::FAILURE)
        }
        Err(e) => Err(e.into()),
    }
}

/// Runs one subcommand against the daemon at `server`: what it shows goes to `out`; warnings,
/// paging hints and notes go to `err`.
pub async fn run(
    server: &str,
    command: &JobsCommand,
    out: &mut impl Write,
    err: &mut impl Write,
) -> Result<(), JobsError> {
    let server = Server::new(server)?;
    match command {
        JobsCommand::List(args) => list(&server, args, out, err).await,
        JobsCommand::Show(args) => show(&server, args, out, err).await,
    }
}

/// One page the daemon gave: its own text (for `-o json`) and what was read of it.
struct Page {
    body: String,
    raw: Value,
    list: JobList,
}

/// `jobs list`: one page, or with `--all` every page to the end, as a table or as JSON.
pub async fn list(
    server: &Server,
    args: &ListArgs,
    out: &mut impl Write,
    err: &mut impl Write,
) -> Result<(), JobsError> {
    // --all without --limit takes the largest pages: fewer round trips for the same jobs.
    let limit = args.limit.or(args.all.then_some(MAX_PAGE));
    let mut token = args.continue_token.clone();
    let mut pages = Vec::new();
    loop {
        let url = server.jobs_url(&query_string(args, limit, token.as_deref()))?;
        let answer = server.get(url).await?;
        let page = page(answer)?;
        let next = page.list.next.clone();
        pages.push(page);
        match next {
            Some(next) if args.all => {
                if token.as_ref() == Some(&next) {
                    return Err(JobsError::Looping {
                        url: server.jobs_url("")?.to_string(),
                    });
                }
                token = Some(next);
            }
            _ => break,
        }
    }

    let mut warnings: Vec<String> = Vec::new();
    let mut elsewhere: BTreeMap<String, String> = BTreeMap::new();
    for page in &pages {
        for warning in &page.list.warnings {
            if !warnings.contains(warning) {
                warnings.push(warning.clone());
            }
        }
        elsewhere.extend(page.list.elsewhere.clone());
    }
    for warning in &warnings {
        writeln!(err, "warning: {warning}")?;
    }

    if args.output == ListOutput::Json {
        if args.all {
            // Every page's items as one object, the same shape however many pages it took.
            let items: Vec<Value> = pages
                .iter()
                .flat_map(|p| p.raw["items"].as_array().cloned().unwrap_or_default())
                .collect();
            let mut merged = serde_json::json!({ "items": items, "warnings": warnings });
            if !elsewhere.is_empty() {
                merged["elsewhere"] = serde_json::json!(elsewhere);
            }
            writeln!(out, "{merged}")?;
        } else {
            for page in &pages {
                writeln!(out, "{}", page.body.trim_end())?;
            }
        }
        return Ok(());
    }

    for (cluster, replica) in &elsewhere {
        writeln!(
            err,
            "note: cluster `{cluster}` is held by replica `{replica}`: its jobs are listed \
             by that replica (--server its address)"
        )?;
    }
    // Where paging stopped short (without --all): the jobs still to come and their token.
    let stopped = match pages.last() {
        Some(last) if !args.all => last.list.next.clone().map(|t| (last.list.remaining, t)),
        _ => None,
    };
    let items: Vec<JobItem> = pages.into_iter().flat_map(|p| p.list.items).collect();
    if items.is_empty() {
        writeln!(err, "no jobs match")?;
    } else {
        let wide = args.output == ListOutput::Wide;
        out.write_all(table::jobs(&items, wide, chrono::Utc::now()).as_bytes())?;
    }
    if let Some((remaining, next)) = stopped {
        writeln!(
            err,
            "{remaining} more {}: add --continue {next} (with the same filters and order) for \
             the next page, or --all for every page",
            if remaining == 1 {
                "job matches"
            } else {
                "jobs match"
            }
        )?;
    }
    Ok(())
}

/// The largest page the API gives.
const MAX_PAGE: u64 = jobrelay_fleet::query::MAX_LIMIT as u64;

/// Reads one page of `GET /api/v1/jobs`; any answer but 200 is the API's refusal.
fn page(answer: Answer) -> Result<Page, JobsError> {
    if answer.status != 200 {
        return Err(refused(answer));
    }
    let raw: Value = serde_json::from_str(&answer.body).map_err(|_| not_json(&answer))?;
    let list: JobList = serde_json::from_value(raw.clone()).map_err(|e| JobsError::NotTheApi {
        url: answer.url.clone(),
        status: answer.status,
        what: format!("JSON of another shape ({e})"),
    })?;
    Ok(Page {
        body: answer.body,
        raw,
        list,
    })
}

/// `jobs show CLUSTER/NAMESPACE/NAME`: the report, or the API's answer with `-o json`. A job
/// the daemon does not have is [`JobsError::NotFound`], after the cluster's warnings.
pub async fn show(
    server: &Server,
    args: &ShowArgs,
    out: &mut impl Write,
    err: &mut impl Write,
) -> Result<(), JobsError> {
    let (cluster, namespace, name) = job_ref(&args.job)?;
    let answer = server
        .get(server.job_url(cluster, namespace, name)?)
        .await?;
    if answer.status == 404
        && let Ok(refusal) = serde_json::from_str::<Refusal>(&answer.body)
        && !refusal.error.is_empty()
    {
        for warning in &refusal.warnings {
            writeln!(err, "warning: {warning}")?;
        }
        return Err(JobsError::NotFound {
            error: refusal.error,
            held_by: refusal.held_by,
        });
    }
    if answer.status != 200 {
        return Err(refused(answer));
    }
    let shown: JobShown = serde_json::from_str(&answer.body).map_err(|_| not_json(&answer))?;
    for warning in &shown.warnings {
        writeln!(err, "warning: {warning}")?;
    }
    match args.output {
        ShowOutput::Json => writeln!(out, "{}", answer.body.trim_end())?,
        ShowOutput::Text => out.write_all(report::report(&shown, chrono::Utc::now()).as_bytes())?,
    }
    Ok(())
}

/// `CLUSTER/NAMESPACE/NAME`, each part non-empty (none of them can hold a `/`).
pub fn job_ref(text: &str) -> Result<(&str, &str, &str), JobsError> {
    let mut parts = text.split('/');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(c), Some(ns), Some(n), None) if !c.is_empty() && !ns.is_empty() && !n.is_empty() => {
            Ok((c, ns, n))
        }
        _ => Err(JobsError::BadJob(text.to_string())),
    }
}

/// A status other than 200: the API's `{"error": …}`, or, when the body is not that, an
/// answer from something that is not the API.
fn refused(answer: Answer) -> JobsError {
    match serde_json::from_str::<Refusal>(&answer.body) {
        Ok(refusal) if !refusal.error.is_empty() => JobsError::Refused {
            url: answer.url,
            status: answer.status,
            error: refusal.error,
        },
        _ => not_json(&answer),
    }
}

fn not_json(answer: &Answer) -> JobsError {
    let body = answer.body.trim();
    JobsError::NotTheApi {
        url: answer.url.clone(),
        status: answer.status,
        what: if body.is_empty() {
            "an empty body".to_string()
        } else {
            format!("`{}`", table::shorten(body, 80))
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_is_cluster_namespace_name() {
        assert_eq!(
            job_ref("east/ml/train-1").ok(),
            Some(("east", "ml", "train-1"))
        );
        for bad in ["east/ml", "east/ml/a/b", "/ml/a", "east//a", "east/ml/", ""] {
            assert!(matches!(job_ref(bad), Err(JobsError::BadJob(_))), "{bad}");
        }
    }
}
