//! What a plugin filter costs per event it rejects: the real dispatcher (`Routes::route`)
//! offering each event to one lane whose filter does not take it, against the same dispatcher
//! with no lane at all. The difference is what the filter adds — judging the event, counting
//! it, and (for a job-level rejection) the lane's check that it holds nothing of the job.
//!
//! Four filters: a job-level rejection by the lists (namespace patterns, exclusions, a label
//! selector), an event-level rejection by phase, and the same two decided by a CEL expression.
//! Each is timed over `ROUNDS` rounds of `EVENTS` events on one thread, alternating with rounds
//! of the lane-less dispatcher; events are cloned in the timed loop in both (the baseline pays
//! the same clone). Printed: the median round of each, and the median of the pairs'
//! differences.
//!
//! Run: `cargo bench -p jobrelay-e2e --bench filter_cost`.

#![expect(
    clippy::print_stdout,
    reason = "a bench's figures are its output, printed for whoever runs it"
)]

use std::sync::Arc;
use std::time::Instant;

use jobrelay_contract::event::{JobEvent, Phase};
use jobrelay_lanes::dispatcher::Routes;
use jobrelay_lanes::filter::{Filter, FilterSpec};
use jobrelay_lanes::handler::Handler;
use jobrelay_lanes::lane::Lane;
use jobrelay_lanes::mode::DeliveryMode;
use jobrelay_lanes::settings::{LaneSettings, RetryPolicy};
use jobrelay_runtime::CallError;
use jobrelay_state::{StateBackend, open_store};
use jobrelay_watch::kinds::JobKind;
use jobrelay_watch::watcher::{Observation, Observed};

const EVENTS: usize = 200_000;
const ROUNDS: usize = 9;

/// Never called: every event is filtered out before the lane.
struct Unreached;

#[async_trait::async_trait]
impl Handler for Unreached {
    fn name(&self) -> &str {
        "unreached"
    }
    fn version(&self) -> &str {
        "0"
    }
    async fn handle(&self, _event: &JobEvent) -> Result<(), CallError> {
        Err(CallError::GiveUp(
            "a filtered event reached the plugin".into(),
        ))
    }
}

fn observation(kind: &Arc<JobKind>, i: usize) -> Observation {
    let uid = format!("00000000-0000-0000-0000-{i:012}");
    Observation::Version(Observed {
        event: JobEvent {
            id: JobEvent::make_id("bench", &uid, "1000"),
            transition_key: String::new(),
            cluster: "bench".into(),
            api_version: "batch/v1".into(),
            kind: "Job".into(),
            namespace: "ml-research".into(),
            name: format!("trainer-{i}"),
            uid,
            resource_version: "1000".into(),
            generation: Some(1),
            phase: Phase::Running,
            raw_phase: "Running".into(),
            reason: None,
            message: None,
            previous_phase: Some(Phase::Pending),
            transition_time: "2026-01-01T00:00:00Z".into(),
            labels: [
                ("team".to_string(), "ml".to_string()),
                ("queue".to_string(), "gpu".to_string()),
                ("app.kubernetes.io/name".to_string(), format!("trainer-{i}")),
            ]
            .into(),
            annotations: Default::default(),
            object_json: Arc::from("{}"),
            synthetic: false,
            story: None,
        },
        kind: Arc::clone(kind),
        from_list: false,
        created: None,
    })
}

fn settings(filter: Filter) -> LaneSettings {
    LaneSettings {
        mode: DeliveryMode::EveryVersion,
        concurrency: 4,
        retry: RetryPolicy::default(),
        rate_limits: Vec::new(),
        kinds: Vec::new(),
        filter: Arc::new(filter),
        max_queued_per_job: 1_000,
        max_inbox_events: 1_000_000,
        fleet_events: Default::default(),
    }
}

/// Nanoseconds per event routed through `routes`, one round.
fn round(routes: &Routes, events: &[Observation]) -> f64 {
    let started = Instant::now();
    for o in events {
        routes.route(o.clone());
    }
    started.elapsed().as_nanos() as f64 / events.len() as f64
}

/// Rounds through `base` and `filtered` alternately: the median of each, and the median of
/// the per-pair differences (what the filter adds, the machine's drift cancelled pair by pair).
fn compare(base: &Routes, filtered: &Routes, events: &[Observation]) -> (f64, f64, f64) {
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (mut bases, mut totals, mut diffs) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let b = round(base, events);
        let t = round(filtered, events);
        bases.push(b);
        totals.push(t);
        diffs.push(t - b);
    }
    (median(bases), median(totals), median(diffs))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let kind = Arc::new(JobKind::builtin("batch-job").expect("batch-job"));
    let events: Vec<Observation> = (0..EVENTS).map(|i| observation(&kind, i)).collect();
    let dir = tempfile::tempdir()?;
    let store = open_store(&StateBackend::Sqlite(dir.path().join("filter.db"))).await?;

    let base = Routes::default();
    let cases: [(&str, &str); 4] = [
        (
            "lists, job rejected (namespace)",
            "{namespaces: ['team-*', 'prod-*'], exclude: {namespaces: [team-sandbox]}, \
             labels: 'queue in (gpu, tpu),tier notin (scratch)'}",
        ),
        (
            "lists, version rejected (phase)",
            "{labels: 'queue=gpu', phases: [failed, succeeded]}",
        ),
        (
            "expression, job rejected",
            "{expression: \"event.namespace.startsWith('team-')\"}",
        ),
        (
            "expression, version rejected",
            "{expression: \"event.phase in ['failed', 'succeeded'] && event.labels['queue'] == 'gpu'\"}",
        ),
    ];
    println!(
        "| filter | dispatcher alone, ns/event | with the filtered lane | added by the filter (median of pairs) |"
    );
    println!("|---|---|---|---|");
    for (name, spec) in cases {
        let spec: FilterSpec = serde_yaml_ng::from_str(spec)?;
        let lane = Lane::open(
            "filtered",
            Arc::new(Unreached),
            settings(Filter::new(spec)?),
            store.clone(),
            None,
        )
        .await?;
        let routes = Routes::default();
        routes.insert("filtered", lane.clone());
        let (alone, total, added) = compare(&base, &routes, &events);
        let stats = lane.stats();
        assert_eq!(
            stats.filtered,
            (EVENTS * ROUNDS) as u64,
            "{name}: every event filtered"
        );
        assert_eq!(stats.pending + stats.delivered, 0, "{name}: nothing queued");
        println!("| {name} | {alone:.0} | {total:.0} | {added:.0} |");
        lane.close().await;
    }
    Ok(())
}
