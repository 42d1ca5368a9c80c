//! The job view API's answers as the command line reads them: the shapes the daemon writes
//! (`JobList`, `JobItem`, `PluginDelivery`, `JobShown`, `PluginTrace` in
//! `telemetry/jobs_api.rs`, `JobSummary` and `JobDetail` of the job view), read leniently.
//!
//! Every field has a default and phases and outcomes stay text: a client talks to daemons of
//! other versions (an older or newer replica during a rollout), and a field it does not know,
//! or one left out, must cost that column, not the whole listing. `-o json` prints the
//! daemon's own text, never these.

use std::collections::BTreeMap;

use serde::Deserialize;

/// `GET /api/v1/jobs`: one page.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct JobList {
    pub items: Vec<JobItem>,
    /// Jobs that match after this page.
    pub remaining: u64,
    /// The token of the next page; absent on the last.
    #[serde(rename = "continue")]
    pub next: Option<String>,
    pub warnings: Vec<String>,
    /// Clusters another replica holds, with its identity (sharded mode).
    pub elsewhere: BTreeMap<String, String>,
}

/// One job of a list, with what each plugin did of it.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct JobItem {
    #[serde(flatten)]
    pub job: JobSummary,
    pub plugins: BTreeMap<String, PluginDelivery>,
}

/// A job's fields.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct JobSummary {
    pub cluster: String,
    pub namespace: String,
    pub name: String,
    pub kind: String,
    pub uid: String,
    pub phase: String,
    pub raw_phase: String,
    pub created: Option<String>,
    pub started: Option<String>,
    pub finished: Option<String>,
    pub deleted: Option<String>,
    pub duration_seconds: Option<u64>,
    pub restarts: u64,
    /// The queue Kueue holds the job in for quota, while it does.
    pub queue: Option<String>,
    pub queued_since: Option<String>,
    /// Times Kueue preempted the job's Workload.
    pub preemptions: u64,
    /// The first failure cause its pods showed.
    pub cause: Option<String>,
    /// The timers of `fleet.timers` firing on the job.
    pub timers: Vec<String>,
}

/// What one plugin did of one job.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct PluginDelivery {
    pub delivered_phase: Option<String>,
    pub accepted_version: Option<String>,
    /// Versions waiting or being delivered.
    pub pending: u64,
    pub in_flight: bool,
    pub dead_letters: u64,
    pub last_error: Option<String>,
}

/// `GET /api/v1/jobs/{cluster}/{namespace}/{name}`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct JobShown {
    pub job: JobDetail,
    pub plugins: BTreeMap<String, PluginTrace>,
    /// Earlier jobs of the same name that were deleted, newest first.
    pub earlier: Vec<JobDetail>,
    pub warnings: Vec<String>,
}

/// A job with its labels and the phases it entered.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct JobDetail {
    #[serde(flatten)]
    pub summary: JobSummary,
    pub labels: BTreeMap<String, String>,
    pub transitions: Vec<Transition>,
    /// The phases and what Kueue did with its Workload, oldest first.
    pub timeline: Vec<TimelineEntry>,
}

/// One line of a job's timeline: a phase entered (`event: phase`) or a Kueue mark
/// (`event: kueue`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct TimelineEntry {
    pub at: Option<String>,
    pub event: String,
    pub phase: Option<String>,
    pub mark: Option<String>,
    pub queue: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Transition {
    pub at: Option<String>,
    pub phase: String,
    /// Rebuilt from the job's status times after a watch gap, not observed.
    pub synthetic: bool,
}

/// What one plugin did of one job, call by call.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct PluginTrace {
    #[serde(flatten)]
    pub delivery: PluginDelivery,
    pub trace: Vec<TraceEntry>,
}

/// One outcome of a call: `delivered`, `retrying` or `dead_lettered`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct TraceEntry {
    pub at: String,
    pub resource_version: String,
    pub phase: String,
    pub outcome: String,
    pub attempt: u32,
    pub error: Option<String>,
}

/// A refusal: `{"error": …}`, with the cluster's warnings and `held_by` for a job not found.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Refusal {
    pub error: String,
    pub warnings: Vec<String>,
    pub held_by: Option<String>,
}
