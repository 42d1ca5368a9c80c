//! `metav1.Condition` lists, the condition shape of the newer controllers (Trainer v2, JobSet,
//! Kueue): `{type, status, reason, message, lastTransitionTime}`, no `lastUpdateTime` or
//! `lastProbeTime`, so a reason-only change leaves no timestamp behind.
//!
//! The Trainer writes them with apimachinery's `meta.SetStatusCondition`, kept here; JobSet
//! has its own `updateCondition` (in `jobset.rs`), which differs in when an entry is appended.
//! Where each entry sits matters to a consumer (kubectl's "State" column of a TrainJob is the
//! last entry's type), so both keep positions exactly as upstream does.

use serde_json::{Value, json};

/// A condition to record.
#[derive(Clone, Debug)]
pub(crate) struct Condition<'a> {
    pub kind: &'a str,
    pub value: bool,
    pub reason: &'a str,
    pub message: &'a str,
}

impl Condition<'_> {
    pub fn status(&self) -> &'static str {
        if self.value { "True" } else { "False" }
    }

    /// The entry as stored, transitioned at `now`.
    pub fn entry(&self, now: &str) -> Value {
        json!({
            "type": self.kind,
            "status": self.status(),
            "reason": self.reason,
            "message": self.message,
            "lastTransitionTime": now,
        })
    }
}

/// Whether a condition of this type is `True`.
pub(crate) fn is_true(status: &Value, kind: &str) -> bool {
    find(status, kind).is_some_and(|c| c["status"] == "True")
}

/// The entry of this type, if any.
pub(crate) fn find<'v>(status: &'v Value, kind: &str) -> Option<&'v Value> {
    status["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == kind))
}

/// Runs `edit` on the condition list (empty when missing or not a list) and stores the result.
pub(crate) fn edit_list<R>(status: &mut Value, edit: impl FnOnce(&mut Vec<Value>) -> R) -> R {
    let mut list = status["conditions"].as_array().cloned().unwrap_or_default();
    let result = edit(&mut list);
    status["conditions"] = Value::Array(list);
    result
}

/// `meta.SetStatusCondition`: a new type is appended; an existing one is changed in place,
/// its `lastTransitionTime` moving only when `status` flips, reason and message always
/// overwritten. Returns whether anything changed.
pub(crate) fn set_status_condition(status: &mut Value, new: &Condition, now: &str) -> bool {
    edit_list(status, |list| {
        let Some(existing) = list.iter_mut().find(|c| c["type"] == new.kind) else {
            list.push(new.entry(now));
            return true;
        };
        let mut changed = false;
        if existing["status"] != new.status() {
            existing["status"] = json!(new.status());
            existing["lastTransitionTime"] = json!(now);
            changed = true;
        }
        for (field, value) in [("reason", new.reason), ("message", new.message)] {
            if existing[field] != value {
                existing[field] = json!(value);
                changed = true;
            }
        }
        changed
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cond<'a>(kind: &'a str, value: bool, reason: &'a str) -> Condition<'a> {
        Condition {
            kind,
            value,
            reason,
            message: "m",
        }
    }

    #[test]
    fn set_status_condition_keeps_positions_and_moves_time_only_on_flips() {
        let mut s = json!({});
        assert!(set_status_condition(
            &mut s,
            &cond("Suspended", true, "Suspended"),
            "t1"
        ));
        assert!(!set_status_condition(
            &mut s,
            &cond("Suspended", true, "Suspended"),
            "t2"
        ));
        set_status_condition(&mut s, &cond("Complete", true, "AllJobsCompleted"), "t3");
        set_status_condition(&mut s, &cond("Suspended", false, "Resumed"), "t4");
        assert_eq!(s["conditions"][0]["type"], "Suspended");
        assert_eq!(s["conditions"][0]["status"], "False");
        assert_eq!(s["conditions"][0]["lastTransitionTime"], "t4");
        assert_eq!(s["conditions"][1]["type"], "Complete");
        // A reason-only change keeps the time.
        set_status_condition(&mut s, &cond("Suspended", false, "Other"), "t5");
        assert_eq!(s["conditions"][0]["reason"], "Other");
        assert_eq!(s["conditions"][0]["lastTransitionTime"], "t4");
        assert!(is_true(&s, "Complete"));
        assert!(!is_true(&s, "Suspended"));
    }
}
