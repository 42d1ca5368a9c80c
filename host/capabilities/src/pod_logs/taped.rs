//! Pod-logs calls on a tape (see `tape.rs`): how pods and errors are written down and read
//! back, and what a diverged replay answers.
//!
//! Apart from the interface so that the tape's format for pod logs is in one place.

use serde_json::json;

use crate::tape::{self, DecodeError, FromDivergence, Taped};
use jobrelay_bindings::jobrelay::plugin::pod_logs::{Container, Error as LogError, Pod as WitPod};

/// A pod on a tape: `{"name", "phase", "node", "containers": [{"name", "restart_count",
/// "init"}]}`.
impl Taped for WitPod {
    fn to_tape(&self) -> serde_json::Value {
        let containers: Vec<serde_json::Value> = self
            .containers
            .iter()
            .map(|c| json!({ "name": c.name, "restart_count": c.restart_count, "init": c.init }))
            .collect();
        json!({
            "name": self.name,
            "phase": self.phase,
            "node": self.node,
            "containers": containers,
        })
    }

    fn from_tape(value: &serde_json::Value) -> Result<WitPod, DecodeError> {
        let container = |value: &serde_json::Value| {
            Ok(Container {
                name: String::from_tape(tape::field(value, "name")?)?,
                restart_count: u32::try_from(u64::from_tape(tape::field(value, "restart_count")?)?)
                    .map_err(|_| DecodeError::TooLarge("restart_count"))?,
                init: bool::from_tape(tape::field(value, "init")?)?,
            })
        };
        Ok(WitPod {
            name: String::from_tape(tape::field(value, "name")?)?,
            phase: String::from_tape(tape::field(value, "phase")?)?,
            node: Option::<String>::from_tape(
                value.get("node").unwrap_or(&serde_json::Value::Null),
            )?,
            containers: tape::list_from_tape(tape::field(value, "containers")?, container)?,
        })
    }
}

impl Taped for Vec<WitPod> {
    fn to_tape(&self) -> serde_json::Value {
        serde_json::Value::Array(self.iter().map(Taped::to_tape).collect())
    }

    fn from_tape(value: &serde_json::Value) -> Result<Vec<WitPod>, DecodeError> {
        tape::list_from_tape(value, WitPod::from_tape)
    }
}

/// `{"denied": "..."}`, `{"not-found": "..."}` or `{"unavailable": "..."}`.
impl Taped for LogError {
    fn to_tape(&self) -> serde_json::Value {
        match self {
            LogError::Denied(m) => tape::case_to_tape("denied", m),
            LogError::NotFound(m) => tape::case_to_tape("not-found", m),
            LogError::Unavailable(m) => tape::case_to_tape("unavailable", m),
        }
    }

    fn from_tape(value: &serde_json::Value) -> Result<LogError, DecodeError> {
        match tape::case_from_tape(value)? {
            ("denied", m) => Ok(LogError::Denied(m.into())),
            ("not-found", m) => Ok(LogError::NotFound(m.into())),
            ("unavailable", m) => Ok(LogError::Unavailable(m.into())),
            (other, _) => Err(DecodeError::UnknownCase {
                case: other.into(),
                of: "a pod-logs error",
            }),
        }
    }
}

impl FromDivergence for LogError {
    fn from_divergence(reason: String) -> LogError {
        LogError::Unavailable(reason)
    }
}
