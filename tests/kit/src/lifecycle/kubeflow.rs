//! Kubeflow `PyTorchJob` (training-operator) and `MPIJob` v2beta1 (mpi-operator) status.
//!
//! `status.conditions[]` entries are `{type, status, reason, message, lastUpdateTime,
//! lastTransitionTime}` with `type` in Created / Running / Restarting / Succeeded / Failed /
//! Suspended and reasons like `PyTorchJobRunning` or `MPIJobSucceeded`. The operators keep one
//! entry per type with the newest appended last; Running and Restarting replace each other;
//! reaching Succeeded or Failed flips Running to `False`; and once Failed is set nothing else
//! is recorded. `replicaStatuses` (per replica type: active/succeeded/failed), `startTime`,
//! `completionTime` and `lastReconcileTime` complete the picture.

use serde_json::{Value, json};

use super::Ctx;

/// A condition to record.
pub(crate) struct Condition<'a> {
    pub kind: &'a str,
    pub value: bool,
    pub reason: String,
    pub message: String,
}

/// The operator's reason for a condition type, e.g. `PyTorchJobRunning`.
pub(crate) fn reason(ctx: &Ctx, what: &str) -> String {
    format!("{}{what}", ctx.kind)
}

/// The operator's message, e.g. `PyTorchJob ns/name is running.`.
pub(crate) fn message(ctx: &Ctx, what: &str) -> String {
    format!("{} {}/{} {what}", ctx.kind, ctx.namespace, ctx.name)
}

fn is_true(status: &Value, kind: &str) -> bool {
    status["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == kind && c["status"] == "True")
    })
}

/// Records a condition with the operators' rules. Returns false when nothing changed.
pub(crate) fn set_condition(status: &mut Value, ctx: &Ctx, new: Condition) -> bool {
    if is_true(status, "Failed") {
        return false; // Failed is final.
    }
    let value = if new.value { "True" } else { "False" };
    let previous = status["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == new.kind))
        .cloned();
    if let Some(prev) = &previous
        && prev["status"] == value
        && prev["reason"] == new.reason.as_str()
    {
        return false;
    }
    let transition = match &previous {
        Some(prev) if prev["status"] == value => prev["lastTransitionTime"].clone(),
        _ => json!(ctx.now),
    };
    let terminal = matches!(new.kind, "Succeeded" | "Failed");
    let mut kept: Vec<Value> = status["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|c| c["type"] != new.kind)
        .filter(|c| !(new.kind == "Running" && c["type"] == "Restarting"))
        .filter(|c| !(new.kind == "Restarting" && c["type"] == "Running"))
        .map(|mut c| {
            if terminal && c["type"] == "Running" {
                c["status"] = json!("False");
            }
            c
        })
        .collect();
    kept.push(json!({
        "type": new.kind,
        "status": value,
        "reason": new.reason,
        "message": new.message,
        "lastUpdateTime": ctx.now,
        "lastTransitionTime": transition,
    }));
    status["conditions"] = json!(kept);
    status["lastReconcileTime"] = json!(ctx.now);
    true
}

/// Sets `replicaStatuses.<Role>` for every role at once.
pub(crate) fn replica_statuses(
    status: &mut Value,
    roles: &[(&str, u32, u32, u32)],
    selector: &str,
) {
    let mut map = serde_json::Map::new();
    for (role, active, succeeded, failed) in roles {
        let mut entry = json!({
            "selector": format!("{selector},training.kubeflow.org/replica-type={}", role.to_lowercase()),
        });
        for (field, n) in [
            ("active", active),
            ("succeeded", succeeded),
            ("failed", failed),
        ] {
            if *n > 0 {
                entry[field] = json!(n);
            }
        }
        map.insert(role.to_string(), entry);
    }
    status["replicaStatuses"] = Value::Object(map);
}

// ----- step helpers -------------------------------------------------------------------------

pub(super) fn kubeflow_condition<'a>(
    c: &Ctx,
    kind: &'a str,
    value: bool,
    what: &str,
) -> Condition<'a> {
    Condition {
        kind,
        value,
        reason: reason(c, kind),
        message: message(c, what),
    }
}

pub(super) fn created_condition(s: &mut Value, c: &Ctx) {
    let has_created = s["conditions"]
        .as_array()
        .is_some_and(|cs| cs.iter().any(|x| x["type"] == "Created"));
    if !has_created {
        set_condition(s, c, kubeflow_condition(c, "Created", true, "is created."));
    }
}

/// `replicaStatuses` for (leader, workers), each as (active, succeeded, failed).
pub(super) fn replica_counts(
    s: &mut Value,
    c: &Ctx,
    leader: (u32, u32, u32),
    workers: (u32, u32, u32),
) {
    let (leader_role, worker_role) = if c.kind == "MPIJob" {
        ("Launcher", "Worker")
    } else {
        ("Master", "Worker")
    };
    let selector = format!("training.kubeflow.org/job-name={}", c.name);
    replica_statuses(
        s,
        &[
            (leader_role, leader.0, leader.1, leader.2),
            (worker_role, workers.0, workers.1, workers.2),
        ],
        &selector,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(now: &str) -> Ctx<'static> {
        Ctx {
            kind: "PyTorchJob",
            namespace: "ns",
            name: "j",
            now: now.to_string(),
            workers: 2,
            total: 3,
        }
    }

    fn cond(c: &Ctx, kind: &'static str, what: &str, value: bool) -> Condition<'static> {
        Condition {
            kind,
            value,
            reason: reason(c, kind),
            message: message(c, what),
        }
    }

    #[test]
    fn operator_condition_rules() {
        let mut s = json!({});
        let c1 = ctx("t1");
        assert!(set_condition(
            &mut s,
            &c1,
            cond(&c1, "Created", "is created.", true)
        ));
        let c2 = ctx("t2");
        set_condition(&mut s, &c2, cond(&c2, "Running", "is running.", true));
        assert!(
            !set_condition(&mut s, &c2, cond(&c2, "Running", "is running.", true)),
            "no-op"
        );
        let c3 = ctx("t3");
        set_condition(&mut s, &c3, cond(&c3, "Restarting", "is restarting.", true));
        let types: Vec<&str> = s["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["type"].as_str().unwrap())
            .collect();
        assert_eq!(types, ["Created", "Restarting"]);
        let c4 = ctx("t4");
        set_condition(&mut s, &c4, cond(&c4, "Running", "is running.", true));
        let c5 = ctx("t5");
        set_condition(
            &mut s,
            &c5,
            cond(&c5, "Succeeded", "successfully completed.", true),
        );
        let running = s["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Running")
            .unwrap();
        assert_eq!(running["status"], "False");
        assert_eq!(s["conditions"][2]["type"], "Succeeded");
        assert_eq!(s["conditions"][2]["reason"], "PyTorchJobSucceeded");
        // Failed is sticky.
        let c6 = ctx("t6");
        set_condition(&mut s, &c6, cond(&c6, "Failed", "has failed.", true));
        let c7 = ctx("t7");
        assert!(!set_condition(
            &mut s,
            &c7,
            cond(&c7, "Running", "is running.", true)
        ));
    }
}
