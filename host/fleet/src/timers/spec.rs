//! The main file's `fleet.timers`: rules on how long one job stays in a state — "a job queued
//! for longer than 2 h", "running for longer than 3 days" — checked here against the watched
//! kinds into the [`Timer`]s the parent module judges.

use serde::{Deserialize, Serialize};

use super::{TimedState, Timer};
use crate::cleanup::{AfterFinished, DurationError};
use crate::rules::spec::is_label_name;

/// One `fleet.timers` entry as written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimerSpec {
    /// The timer's name, unique among the timers and rules; its fleet events carry it.
    pub name: String,
    /// The state a job must stay in.
    pub state: TimedState,
    /// How long it may stay before the timer fires (`30m`, `2h`, seconds as a number).
    pub longer_than: AfterFinished,
    /// Cluster name patterns (`*` and `?`); empty: every cluster.
    #[serde(default)]
    pub clusters: Vec<String>,
    /// Namespaces (empty: all).
    #[serde(default)]
    pub namespaces: Vec<String>,
    /// Configured kind names (empty: all).
    #[serde(default)]
    pub kinds: Vec<String>,
}

/// The most timers `fleet.timers` may hold (each is judged on every job at each evaluation).
pub const MAX_TIMERS: usize = 50;
/// The longest `longer_than`: 90 days.
const MAX_LONGER_THAN_SECONDS: u64 = 90 * 86_400;

/// Why `fleet.timers` is refused; the message names the field (`timer` is the entry's index).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TimerError {
    /// More timers than each evaluation should walk every job for.
    #[error("fleet.timers: at most {MAX_TIMERS} timers")]
    TooMany {
        /// The number given.
        given: usize,
    },
    /// A name that cannot be a label value of the timer's events.
    #[error("fleet.timers[{timer}].name: `{name}` must be 1-63 characters of a-z, 0-9 and -")]
    BadName {
        /// The entry's index.
        timer: usize,
        /// The name as written.
        name: String,
    },
    /// A name another timer or a rule has: their events could not be told apart.
    #[error("fleet.timers[{timer}].name: `{name}` is used twice (timers and rules share names)")]
    NameTwice {
        /// The entry's index.
        timer: usize,
        /// The name.
        name: String,
    },
    /// `longer_than` is not a duration.
    #[error("fleet.timers[{timer}].longer_than: {why}")]
    Duration {
        /// The entry's index.
        timer: usize,
        /// Why it is not a duration.
        #[source]
        why: DurationError,
    },
    /// `longer_than` of nothing (every job would fire) or of more than 90 days.
    #[error("fleet.timers[{timer}].longer_than: from 1s to 90 days")]
    OutOfRange {
        /// The entry's index.
        timer: usize,
        /// The duration given, in seconds.
        seconds: u64,
    },
    /// A kind the main file does not watch, so the timer would never see its jobs.
    #[error("fleet.timers[{timer}].kinds: `{kind}` is not a configured kind")]
    UnknownKind {
        /// The entry's index.
        timer: usize,
        /// The kind as written.
        kind: String,
    },
}

/// The timers of `specs`, checked against the configured kinds' names and the rules' names
/// (`taken`); or the first field at fault.
pub fn validate(
    specs: &[TimerSpec],
    kind_names: &[&str],
    taken: &[&str],
) -> Result<Vec<Timer>, TimerError> {
    if specs.len() > MAX_TIMERS {
        return Err(TimerError::TooMany { given: specs.len() });
    }
    let mut timers: Vec<Timer> = Vec::new();
    for (timer, spec) in specs.iter().enumerate() {
        if !is_label_name(&spec.name) {
            return Err(TimerError::BadName {
                timer,
                name: spec.name.clone(),
            });
        }
        if taken.contains(&spec.name.as_str()) || timers.iter().any(|t| t.name == spec.name) {
            return Err(TimerError::NameTwice {
                timer,
                name: spec.name.clone(),
            });
        }
        let seconds = spec
            .longer_than
            .duration()
            .map_err(|why| TimerError::Duration { timer, why })?
            .as_secs();
        if !(1..=MAX_LONGER_THAN_SECONDS).contains(&seconds) {
            return Err(TimerError::OutOfRange { timer, seconds });
        }
        if let Some(kind) = spec
            .kinds
            .iter()
            .find(|k| !kind_names.contains(&k.as_str()))
        {
            return Err(TimerError::UnknownKind {
                timer,
                kind: kind.clone(),
            });
        }
        timers.push(Timer {
            name: spec.name.clone(),
            state: spec.state,
            longer_than: seconds as u32,
            clusters: spec.clusters.clone(),
            namespaces: spec.namespaces.clone(),
            kinds: spec.kinds.clone(),
        });
    }
    Ok(timers)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Vec<TimerSpec> {
        serde_yaml_ng::from_str(yaml).expect("parses")
    }

    #[test]
    fn a_timer_is_checked_naming_the_field() {
        let kinds = ["batch-job", "pytorch-job"];
        let ok =
            parse("[{name: queued-long, state: queued, longer_than: 2h, kinds: [pytorch-job]}]");
        let timers = validate(&ok, &kinds, &[]).expect("valid");
        assert_eq!(timers[0].longer_than, 7200);
        assert_eq!(timers[0].state, TimedState::Queued);
        for (yaml, taken, needle) in [
            (
                "[{name: Bad, state: pending, longer_than: 1m}]",
                &[][..],
                "fleet.timers[0].name",
            ),
            (
                "[{name: a, state: pending, longer_than: 1m}, {name: a, state: running, longer_than: 1m}]",
                &[],
                "fleet.timers[1].name: `a` is used twice",
            ),
            (
                "[{name: r, state: pending, longer_than: 1m}]",
                &["r"],
                "used twice",
            ),
            (
                "[{name: a, state: pending, longer_than: soon}]",
                &[],
                "fleet.timers[0].longer_than",
            ),
            (
                "[{name: a, state: pending, longer_than: 0}]",
                &[],
                "from 1s to 90 days",
            ),
            (
                "[{name: a, state: pending, longer_than: 1m, kinds: [tf-job]}]",
                &[],
                "`tf-job`",
            ),
        ] {
            let e = validate(&parse(yaml), &kinds, taken).expect_err(yaml);
            assert!(e.to_string().contains(needle), "{yaml}: {e}");
        }
        let unknown: Result<Vec<TimerSpec>, _> =
            serde_yaml_ng::from_str("[{name: a, state: stuck, longer_than: 1m}]");
        assert!(unknown.is_err(), "an unknown state is refused");
    }
}
