//! Volcano `batch.volcano.sh/v1alpha1 Job` status as the Volcano job controller writes it.
//!
//! The phase lives in `status.state.{phase,reason,message,lastTransitionTime}`; every phase
//! change also appends `{status: <phase>, lastTransitionTime}` to `status.conditions` (one
//! entry per transition, which is what lets a consumer rebuild transitions it missed). Pod
//! counts (`pending`, `running`, `succeeded`, `failed`, `terminating`, `unknown`),
//! `taskStatusCount`, `minAvailable`, `retryCount` and `version` are kept alongside.

use serde_json::{Value, json};

use super::Ctx;

/// Pod counts per phase, plus the task breakdown.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Counts {
    pub pending: u32,
    pub running: u32,
    pub succeeded: u32,
    pub failed: u32,
    pub terminating: u32,
}

/// The current phase (`state.phase`), or `""`.
pub(crate) fn phase(status: &Value) -> &str {
    status["state"]["phase"].as_str().unwrap_or_default()
}

/// Moves the job to `phase` with the given pod counts.
pub(crate) fn transition(
    status: &mut Value,
    ctx: &Ctx,
    phase: &str,
    reason: &str,
    message: &str,
    counts: Counts,
) {
    status["state"] = json!({
        "phase": phase,
        "reason": reason,
        "message": message,
        "lastTransitionTime": ctx.now,
    });
    status["minAvailable"] = json!(ctx.total);
    status["pending"] = json!(counts.pending);
    status["running"] = json!(counts.running);
    status["succeeded"] = json!(counts.succeeded);
    status["failed"] = json!(counts.failed);
    status["terminating"] = json!(counts.terminating);
    status["unknown"] = json!(0);
    if status.get("version").is_none() {
        status["version"] = json!(0);
    }
    if status.get("retryCount").is_none() {
        status["retryCount"] = json!(0);
    }
    status["taskStatusCount"] = task_counts(ctx.workers, counts);
    if !status["conditions"].is_array() {
        status["conditions"] = json!([]);
    }
    if let Some(conditions) = status["conditions"].as_array_mut() {
        conditions.push(json!({ "status": phase, "lastTransitionTime": ctx.now }));
    }
}

/// `taskStatusCount`: the single master and the workers, by pod phase. The master is counted
/// in the first non-zero bucket, the workers in the rest.
fn task_counts(workers: u32, counts: Counts) -> Value {
    let buckets = [
        ("Pending", counts.pending),
        ("Running", counts.running),
        ("Succeeded", counts.succeeded),
        ("Failed", counts.failed),
        ("Terminating", counts.terminating),
    ];
    let Some((master_phase, _)) = buckets.iter().find(|(_, n)| *n > 0) else {
        return json!({});
    };
    let mut worker_phases = serde_json::Map::new();
    let mut master_taken = false;
    for (phase, n) in buckets {
        let n = if !master_taken && phase == *master_phase {
            master_taken = true;
            n - 1
        } else {
            n
        };
        if n > 0 {
            worker_phases.insert(phase.to_string(), json!(n.min(workers)));
        }
    }
    json!({
        "master": { "phase": { *master_phase: 1 } },
        "worker": { "phase": worker_phases },
    })
}

/// Increments `retryCount` and `version`, as a restart does.
pub(crate) fn bump_retry(status: &mut Value) {
    let retry = status["retryCount"].as_u64().unwrap_or(0) + 1;
    let version = status["version"].as_u64().unwrap_or(0) + 1;
    status["retryCount"] = json!(retry);
    status["version"] = json!(version);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conditions_accumulate_per_phase() {
        let ctx = |now: &str| Ctx {
            kind: "Job",
            namespace: "ns",
            name: "j",
            now: now.to_string(),
            workers: 2,
            total: 3,
        };
        let mut s = json!({});
        transition(
            &mut s,
            &ctx("t1"),
            "Pending",
            "",
            "",
            Counts {
                pending: 3,
                ..Counts::default()
            },
        );
        transition(
            &mut s,
            &ctx("t2"),
            "Running",
            "",
            "",
            Counts {
                running: 3,
                ..Counts::default()
            },
        );
        assert_eq!(phase(&s), "Running");
        assert_eq!(s["conditions"].as_array().unwrap().len(), 2);
        assert_eq!(
            s["conditions"][1],
            json!({ "status": "Running", "lastTransitionTime": "t2" })
        );
        assert_eq!(s["taskStatusCount"]["master"]["phase"]["Running"], 1);
        assert_eq!(s["taskStatusCount"]["worker"]["phase"]["Running"], 2);
        bump_retry(&mut s);
        assert_eq!(s["retryCount"], 1);
        assert_eq!(s["version"], 1);
    }
}
