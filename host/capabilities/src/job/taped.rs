//! `job` writes on a tape (see `tape.rs`): how the interface's errors are written down and
//! read back, and what a diverged replay answers, so a plugin's writes to its job are recorded
//! with their answers and answered offline on replay like every other call.

use crate::tape::{self, DecodeError, FromDivergence, Taped};
use jobrelay_bindings::jobrelay::plugin::job::Error as JobError;

/// `{"denied": "..."}`, `{"invalid": "..."}`, `{"gone": "..."}` or `{"unavailable": "..."}`.
impl Taped for JobError {
    fn to_tape(&self) -> serde_json::Value {
        match self {
            JobError::Denied(m) => tape::case_to_tape("denied", m),
            JobError::Invalid(m) => tape::case_to_tape("invalid", m),
            JobError::Gone(m) => tape::case_to_tape("gone", m),
            JobError::Unavailable(m) => tape::case_to_tape("unavailable", m),
        }
    }

    fn from_tape(value: &serde_json::Value) -> Result<JobError, DecodeError> {
        match tape::case_from_tape(value)? {
            ("denied", m) => Ok(JobError::Denied(m.into())),
            ("invalid", m) => Ok(JobError::Invalid(m.into())),
            ("gone", m) => Ok(JobError::Gone(m.into())),
            ("unavailable", m) => Ok(JobError::Unavailable(m.into())),
            (other, _) => Err(DecodeError::UnknownCase {
                case: other.into(),
                of: "a job error",
            }),
        }
    }
}

/// A diverged write is one the cluster could not be asked: the plugin retries or goes on as
/// after an outage.
impl FromDivergence for JobError {
    fn from_divergence(reason: String) -> JobError {
        JobError::Unavailable(reason)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_case_round_trips_and_an_unknown_one_is_named() {
        for error in [
            JobError::Denied("d".into()),
            JobError::Invalid("i".into()),
            JobError::Gone("g".into()),
            JobError::Unavailable("u".into()),
        ] {
            let back = JobError::from_tape(&error.to_tape()).expect("reads back");
            assert_eq!(format!("{back:?}"), format!("{error:?}"));
        }
        let err = JobError::from_tape(&serde_json::json!({"lost": "x"})).expect_err("unknown");
        assert!(err.to_string().contains("lost"), "{err}");
    }
}
