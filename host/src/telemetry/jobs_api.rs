//! The job view API: `GET /api/v1/jobs`, `GET /api/v1/jobs/{cluster}/{namespace}/{name}` and
//! the OpenAPI document that describes both, `GET /api/v1/openapi.json`.
//!
//! Every answer comes from memory: the jobs from the job view ([`jobrelay_fleet::jobs`]),
//! what each plugin did from its lane, and dead letters from one read of the state store per
//! request (bounded by [`STORE_WAIT`], so a store that hangs costs a warning, not the
//! answer). No request calls a cluster's API server, so none waits on one: a cluster that is
//! not synced gives its jobs as last seen, with a warning naming it. In sharded mode a
//! replica answers for its own clusters and names the replica that holds each other one.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::Json;
use axum::extract::{Path, RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use super::status::StatusSources;
use crate::clusters::health::HealthState;
use jobrelay_contract::event::JobKey;
use jobrelay_coordination::{Role, rendezvous};
use jobrelay_fleet::jobs::{JobDetail, JobSummary};
use jobrelay_fleet::query::JobQuery;
use jobrelay_lanes::queue::JobDelivery;
use jobrelay_lanes::trace::TraceEntry;
use jobrelay_state::JobDeadLetters;

/// The longest a request waits for the state store's dead letters.
pub const STORE_WAIT: Duration = Duration::from_secs(2);

/// The OpenAPI document, as served.
pub const OPENAPI: &str = include_str!("openapi.json");

/// What a request for jobs gives.
#[derive(Debug, Serialize)]
pub struct JobList {
    pub items: Vec<JobItem>,
    /// Jobs that match after this page.
    pub remaining: u64,
    #[serde(rename = "continue", skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
    /// Clusters whose jobs are partial or missing here, and why.
    pub warnings: Vec<String>,
    /// Clusters that another replica holds, with its identity (sharded mode).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub elsewhere: BTreeMap<String, String>,
}

/// One job with what each plugin did of it.
#[derive(Debug, Serialize)]
pub struct JobItem {
    #[serde(flatten)]
    pub job: JobSummary,
    pub plugins: BTreeMap<String, PluginDelivery>,
}

/// What one plugin did of one job.
#[derive(Debug, Default, Serialize)]
pub struct PluginDelivery {
    /// What its lane keeps of the job; absent when the lane does not know it (its kinds or
    /// filter do not take the job, or the plugin is not loaded).
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub lane: Option<JobDelivery>,
    /// Dead letters of the job stored for the plugin.
    pub dead_letters: u64,
    /// The latest error: of a call not yet followed by a delivery, else of the latest dead
    /// letter.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// One job with its transitions and each plugin's trace.
#[derive(Debug, Serialize)]
pub struct JobShown {
    pub job: JobDetail,
    pub plugins: BTreeMap<String, PluginTrace>,
    /// Earlier jobs of the same name that were deleted (newest first).
    pub earlier: Vec<JobDetail>,
    pub warnings: Vec<String>,
}

/// What one plugin did of one job, call by call.
#[derive(Debug, Serialize)]
pub struct PluginTrace {
    #[serde(flatten)]
    pub delivery: PluginDelivery,
    /// Its latest outcomes still in the lane's trace, oldest first.
    pub trace: Vec<TraceEntry>,
}

/// Why a request is answered without jobs: its status and message, and for a job not found,
/// the warnings of its cluster and the replica that holds it (sharded mode).
#[derive(Debug)]
pub struct Refused {
    pub status: StatusCode,
    pub error: String,
    /// Given (possibly empty) for a job not found; absent otherwise.
    pub warnings: Option<Vec<String>>,
    pub held_by: Option<String>,
}

impl Refused {
    fn new(status: StatusCode, error: impl Into<String>) -> Refused {
        Refused {
            status,
            error: error.into(),
            warnings: None,
            held_by: None,
        }
    }
}

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        let mut body = serde_json::json!({ "error": self.error });
        if let Some(warnings) = self.warnings {
            body["warnings"] = serde_json::json!(warnings);
        }
        if let Some(owner) = self.held_by {
            body["held_by"] = serde_json::Value::String(owner);
        }
        (self.status, Json(body)).into_response()
    }
}

pub async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI).into_response()
}

pub async fn list(State(sources): State<StatusSources>, RawQuery(query): RawQuery) -> Response {
    match list_jobs(&sources, query.as_deref().unwrap_or("")).await {
        Ok(list) => Json(list).into_response(),
        Err(refused) => refused.into_response(),
    }
}

pub async fn show(
    State(sources): State<StatusSources>,
    Path((cluster, namespace, name)): Path<(String, String, String)>,
) -> Response {
    match show_job(&sources, &cluster, &namespace, &name).await {
        Ok(shown) => Json(shown).into_response(),
        Err(refused) => refused.into_response(),
    }
}

/// The jobs a query string (without the `?`) asks for, read through [`JobQuery::parse`]: what
/// `GET /api/v1/jobs` answers, and the status page's Jobs view shows.
pub async fn list_jobs(sources: &StatusSources, query: &str) -> Result<JobList, Refused> {
    let query =
        JobQuery::parse(query).map_err(|e| Refused::new(StatusCode::BAD_REQUEST, e.to_string()))?;
    let Some(view) = sources.routes.view().cloned() else {
        return Err(Refused::new(StatusCode::SERVICE_UNAVAILABLE, "no job view"));
    };
    let asked = query.clusters.clone();
    // A scan of a large view is CPU work of milliseconds: off the runtime's threads.
    let page = tokio::task::spawn_blocking(move || view.list(&query))
        .await
        .map_err(|e| Refused::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    let (mut warnings, elsewhere) = coverage(sources, &asked);
    let keys: Vec<JobKey> = page
        .items
        .iter()
        .map(|j| JobKey {
            cluster: j.cluster.clone(),
            uid: j.uid.clone(),
        })
        .collect();
    let mut plugins = deliveries(sources, &keys, &mut warnings).await;
    let items = page
        .items
        .into_iter()
        .zip(plugins.drain(..))
        .map(|(job, plugins)| JobItem { job, plugins })
        .collect();
    Ok(JobList {
        items,
        remaining: page.remaining,
        next: page.next,
        warnings,
        elsewhere,
    })
}

/// One job with its transitions and each plugin's trace: what
/// `GET /api/v1/jobs/{cluster}/{namespace}/{name}` answers, and the Jobs view's job page shows.
pub async fn show_job(
    sources: &StatusSources,
    cluster: &str,
    namespace: &str,
    name: &str,
) -> Result<JobShown, Refused> {
    let Some(view) = sources.routes.view().cloned() else {
        return Err(Refused::new(StatusCode::SERVICE_UNAVAILABLE, "no job view"));
    };
    let cluster = cluster.to_string();
    let (mut warnings, elsewhere) = coverage(sources, std::slice::from_ref(&cluster));
    let mut found = view.find(&cluster, namespace, name).into_iter();
    let Some(job) = found.next() else {
        let held_by = elsewhere.get(&cluster).cloned();
        let error = match &held_by {
            Some(owner) => format!(
                "cluster `{cluster}` is held by replica `{owner}`: ask it for {namespace}/{name}"
            ),
            None => format!("no job {namespace}/{name} on cluster `{cluster}` here"),
        };
        return Err(Refused {
            status: StatusCode::NOT_FOUND,
            error,
            warnings: Some(warnings),
            held_by,
        });
    };
    let key = JobKey {
        cluster: cluster.clone(),
        uid: job.summary.uid.clone(),
    };
    let mut deliveries = deliveries(sources, std::slice::from_ref(&key), &mut warnings).await;
    let lanes = sources.routes.lanes();
    let plugins = deliveries
        .pop()
        .unwrap_or_default()
        .into_iter()
        .map(|(plugin, delivery)| {
            let trace = lanes
                .get(&plugin)
                .map(|lane| lane.trace_of(&key))
                .unwrap_or_default();
            (plugin, PluginTrace { delivery, trace })
        })
        .collect();
    Ok(JobShown {
        job,
        plugins,
        earlier: found.collect(),
        warnings,
    })
}

/// Warnings for the clusters in scope that are not synced here, and the clusters another
/// replica holds. `asked` empty: every cluster.
fn coverage(sources: &StatusSources, asked: &[String]) -> (Vec<String>, BTreeMap<String, String>) {
    let health = sources.health.snapshot();
    let role = sources.role.borrow().clone();
    let mut warnings = Vec::new();
    let mut elsewhere = BTreeMap::new();
    // Clusters on their way here: this replica is their owner among the live members but
    // does not hold their Lease yet.
    let mut arriving = Vec::new();
    if let Role::Sharded {
        owned,
        members,
        clusters,
        identity,
        ..
    } = &role
    {
        for cluster in clusters {
            if owned.contains(cluster) || !(asked.is_empty() || asked.contains(cluster)) {
                continue;
            }
            match rendezvous::owner(cluster, members.iter().map(String::as_str)) {
                Some(owner) if owner != identity => {
                    elsewhere.insert(cluster.clone(), owner.to_string());
                }
                _ => arriving.push(cluster.clone()),
            }
        }
    }
    for cluster in &arriving {
        warnings.push(format!(
            "cluster `{cluster}` is being taken over by this replica: its jobs are not here yet"
        ));
    }
    let scope: Vec<&String> = if asked.is_empty() {
        health.keys().collect()
    } else {
        asked.iter().collect()
    };
    for cluster in scope {
        match health.get(cluster) {
            Some(h) if h.state == HealthState::Synced => {}
            Some(h) => warnings.push(format!(
                "cluster `{cluster}` is {} since {}{}: its jobs are as last seen",
                state_name(h.state),
                h.since,
                h.last_error
                    .as_deref()
                    .map(|e| format!(" ({e})"))
                    .unwrap_or_default()
            )),
            None if arriving.contains(cluster) => {}
            None => match elsewhere.get(cluster) {
                Some(owner) => warnings.push(format!(
                    "cluster `{cluster}` is held by replica `{owner}`: ask it"
                )),
                None => warnings.push(format!(
                    "cluster `{cluster}` is not watched by this replica"
                )),
            },
        }
    }
    (warnings, elsewhere)
}

fn state_name(state: HealthState) -> &'static str {
    match state {
        HealthState::Connecting => "connecting",
        HealthState::Synced => "synced",
        HealthState::Degraded => "degraded",
        HealthState::Error => "failing",
    }
}

/// For each job, what each plugin did of it: its lane's record and latest error, and the
/// dead letters stored (one read for all the jobs).
async fn deliveries(
    sources: &StatusSources,
    keys: &[JobKey],
    warnings: &mut Vec<String>,
) -> Vec<BTreeMap<String, PluginDelivery>> {
    let mut out: Vec<BTreeMap<String, PluginDelivery>> =
        keys.iter().map(|_| BTreeMap::new()).collect();
    if keys.is_empty() {
        return out;
    }
    for (plugin, lane) in sources.routes.lanes() {
        let errors = lane.last_errors(keys);
        for (i, key) in keys.iter().enumerate() {
            let Some(state) = lane.delivery_of(key) else {
                continue;
            };
            out[i].insert(
                plugin.clone(),
                PluginDelivery {
                    lane: Some(state),
                    dead_letters: 0,
                    last_error: errors[i].clone(),
                },
            );
        }
    }
    let jobs: Vec<(String, String)> = keys
        .iter()
        .map(|k| (k.cluster.clone(), k.uid.clone()))
        .collect();
    let letters = match &sources.delivery_store {
        Some(store) => tokio::time::timeout(STORE_WAIT, store.dead_letters_of_jobs(&jobs)).await,
        None => Ok(Ok(Vec::new())),
    };
    let letters: Vec<JobDeadLetters> = match letters {
        Ok(Ok(letters)) => letters,
        Ok(Err(e)) => {
            warnings.push(format!("dead letters not shown: {e}"));
            Vec::new()
        }
        Err(_) => {
            warnings.push(format!(
                "dead letters not shown: the state store did not answer within {} s",
                STORE_WAIT.as_secs()
            ));
            Vec::new()
        }
    };
    for letter in letters {
        let Some(i) = keys
            .iter()
            .position(|k| k.cluster == letter.cluster && k.uid == letter.uid)
        else {
            continue;
        };
        let entry = out[i].entry(letter.plugin).or_default();
        entry.dead_letters = letter.count;
        if entry.last_error.is_none() {
            entry.last_error = Some(letter.last_error);
        }
    }
    out
}
