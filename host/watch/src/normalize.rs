//! Status normalizers: a job kind's own status → one [`Phase`] plus the raw value, reason,
//! message and transition time that decided it.
//!
//! Normalizers read JSON, never typed structs, so that partial, old or odd statuses (fields
//! missing, wrong types, unknown values) degrade to `pending`/`unknown` instead of failing.
//! The rules per kind are documented in `docs/job-kinds.md`.

use serde_json::Value;

use super::json_pointer::at;
use super::kinds::{ConditionRule, FieldRule, NormalizerSpec};
use jobrelay_contract::event::Phase;

/// What a normalizer concluded about one version of a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Normalized {
    /// The phase the status means.
    pub phase: Phase,
    /// The kind's own phase or deciding condition type; empty when the status said nothing.
    pub raw_phase: String,
    /// Machine-readable reason from the deciding status field.
    pub reason: Option<String>,
    /// Human-readable message from the deciding status field.
    pub message: Option<String>,
    /// RFC 3339, when the status records when this phase began.
    pub transition_time: Option<String>,
}

impl Normalized {
    fn bare(phase: Phase, raw: &str) -> Self {
        Normalized {
            phase,
            raw_phase: raw.to_string(),
            reason: None,
            message: None,
            transition_time: None,
        }
    }
}

/// Normalise one object. A set `metadata.deletionTimestamp` overrides the status: the job is
/// terminating, whatever its run state was (the raw phase still tells that state).
pub fn normalize(spec: &NormalizerSpec, object: &Value) -> Normalized {
    let mut n = match spec {
        NormalizerSpec::Batch => batch(object),
        NormalizerSpec::Volcano => volcano(object),
        NormalizerSpec::Kubeflow => conditions(object, KUBEFLOW_ORDER.iter().copied()),
        NormalizerSpec::Conditions(rules) => conditions(
            object,
            rules
                .iter()
                .map(|r: &ConditionRule| (r.type_.as_str(), r.phase)),
        ),
        NormalizerSpec::Field(rule) => field(object, rule),
        NormalizerSpec::Rules(rules) => rules.normalize(object),
    };
    if let Some(ts) = str_at(object, "/metadata/deletionTimestamp") {
        n.phase = Phase::Terminating;
        n.transition_time = Some(ts.to_string());
    }
    n
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    at(v, pointer).and_then(Value::as_str)
}

fn int_at(v: &Value, pointer: &str) -> i64 {
    at(v, pointer).and_then(Value::as_i64).unwrap_or(0)
}

/// `status.conditions[]` entries whose `status` is `"True"`.
fn true_conditions(object: &Value) -> impl Iterator<Item = &Value> {
    at(object, "/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|c| c.get("status").and_then(Value::as_str) == Some("True"))
}

fn from_condition(phase: Phase, c: &Value) -> Normalized {
    let s = |k: &str| c.get(k).and_then(Value::as_str).map(str::to_string);
    Normalized {
        phase,
        raw_phase: s("type").unwrap_or_default(),
        reason: s("reason").filter(|r| !r.is_empty()),
        message: s("message").filter(|m| !m.is_empty()),
        transition_time: s("lastTransitionTime"),
    }
}

/// batch/v1 Job: deciding conditions in order Failed, Complete, FailureTarget,
/// SuccessCriteriaMet, Suspended; otherwise `active > 0` means running, else pending.
///
/// FailureTarget and SuccessCriteriaMet mean the outcome is decided while pods may still be
/// terminating; they normalise to failed/succeeded and the raw phase keeps the difference.
fn batch(object: &Value) -> Normalized {
    const ORDER: [(&str, Phase); 5] = [
        ("Failed", Phase::Failed),
        ("Complete", Phase::Succeeded),
        ("FailureTarget", Phase::Failed),
        ("SuccessCriteriaMet", Phase::Succeeded),
        ("Suspended", Phase::Suspended),
    ];
    let trues: Vec<&Value> = true_conditions(object).collect();
    for (ty, phase) in ORDER {
        if let Some(c) = trues
            .iter()
            .find(|c| c.get("type").and_then(Value::as_str) == Some(ty))
        {
            return from_condition(phase, c);
        }
    }
    if int_at(object, "/status/active") > 0 {
        let mut n = Normalized::bare(Phase::Running, "Active");
        n.transition_time = str_at(object, "/status/startTime").map(str::to_string);
        return n;
    }
    Normalized::bare(Phase::Pending, "")
}

/// Volcano `batch.volcano.sh/v1alpha1` Job: `status.state.phase`, mapped by [`volcano_phase`].
fn volcano(object: &Value) -> Normalized {
    let Some(raw) = str_at(object, "/status/state/phase").filter(|p| !p.is_empty()) else {
        return Normalized::bare(Phase::Pending, "");
    };
    let phase = volcano_phase(raw);
    let s = |p: &str| {
        str_at(object, p)
            .filter(|v| !v.is_empty())
            .map(str::to_string)
    };
    Normalized {
        phase,
        raw_phase: raw.to_string(),
        reason: s("/status/state/reason"),
        message: s("/status/state/message"),
        transition_time: s("/status/state/lastTransitionTime"),
    }
}

/// A Volcano `JobPhase` as a normalized phase (also used for the phases recorded in
/// `status.conditions`, see `catch_up`).
///
/// Phases that still hold workers while moving on (Completing, Terminating, Aborting) count as
/// running; Aborted can be resumed, so it counts as suspended; Terminated is a failure.
pub(crate) fn volcano_phase(raw: &str) -> Phase {
    match raw {
        "Pending" => Phase::Pending,
        "Running" | "Completing" | "Terminating" | "Aborting" => Phase::Running,
        "Restarting" => Phase::Restarting,
        "Completed" => Phase::Succeeded,
        "Failed" | "Terminated" => Phase::Failed,
        "Aborted" => Phase::Suspended,
        _ => Phase::Unknown,
    }
}

/// Kubeflow PyTorchJob / MPIJob precedence: the first true condition wins.
const KUBEFLOW_ORDER: [(&str, Phase); 6] = [
    ("Failed", Phase::Failed),
    ("Succeeded", Phase::Succeeded),
    ("Suspended", Phase::Suspended),
    ("Restarting", Phase::Restarting),
    ("Running", Phase::Running),
    ("Created", Phase::Pending),
];

/// First condition with status True in the given order. No conditions at all means the
/// controller has not reported yet (pending); conditions present but none deciding is unknown.
fn conditions<'r>(object: &Value, order: impl Iterator<Item = (&'r str, Phase)>) -> Normalized {
    let trues: Vec<&Value> = true_conditions(object).collect();
    for (ty, phase) in order {
        if let Some(c) = trues
            .iter()
            .find(|c| c.get("type").and_then(Value::as_str) == Some(ty))
        {
            return from_condition(phase, c);
        }
    }
    let has_any = at(object, "/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty());
    if has_any {
        Normalized::bare(Phase::Unknown, "")
    } else {
        Normalized::bare(Phase::Pending, "")
    }
}

/// A phase string at a JSON pointer, mapped through the rule's table.
fn field(object: &Value, rule: &FieldRule) -> Normalized {
    let Some(raw) = str_at(object, &rule.path).filter(|p| !p.is_empty()) else {
        return Normalized::bare(Phase::Pending, "");
    };
    let opt = |p: &Option<String>| {
        p.as_deref()
            .and_then(|p| str_at(object, p))
            .filter(|v| !v.is_empty())
            .map(str::to_string)
    };
    Normalized {
        phase: rule.phases.get(raw).copied().unwrap_or(Phase::Unknown),
        raw_phase: raw.to_string(),
        reason: opt(&rule.reason_path),
        message: opt(&rule.message_path),
        transition_time: opt(&rule.time_path),
    }
}

#[cfg(test)]
mod tests;
