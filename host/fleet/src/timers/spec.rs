//! The main file's `fleet.timers`: rules on how long one job stays in a state — "a job queued
//! for longer than 2 h", "running for longer than 3 days" — or how often something happens
//! to it — "preempted more than 3 times in 1 h" — checked here against the watched kinds into
//! the [`Timer`]s the parent module judges.

use serde::{Deserialize, Serialize};

use super::{Counted, Measure, TimedState, Timer};
use crate::cleanup::{AfterFinished, DurationError};
use crate::rules::spec::is_label_name;

/// One `fleet.timers` entry as written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimerSpec {
    /// The timer's name, unique among the timers and rules; its fleet events carry it.
    pub name: String,
    /// The state a job must stay in (a stay timer, with `longer_than`).
    #[serde(default)]
    pub state: Option<TimedState>,
    /// How long it may stay before the timer fires (`30m`, `2h`, seconds as a number).
    #[serde(default)]
    pub longer_than: Option<AfterFinished>,
    /// What a counting timer counts (with `more_than` and `within`).
    #[serde(default)]
    pub counts: Option<Counted>,
    /// How many the window may hold before the timer fires.
    #[serde(default)]
    pub more_than: Option<u32>,
    /// The window (`1h`, `1d`, seconds as a number).
    #[serde(default)]
    pub within: Option<AfterFinished>,
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
/// The longest `longer_than` or `within`: 90 days.
const MAX_LONGER_THAN_SECONDS: u64 = 90 * 86_400;
/// The highest `more_than`: each job a counting timer covers keeps `more_than` + 1 times.
pub const MAX_MORE_THAN: u32 = 100;

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
    /// Neither or both of a stay timer's and a counting timer's fields.
    #[error(
        "fleet.timers[{timer}]: give either `state` and `longer_than` (a stay) or `counts`, \
         `more_than` and `within` (a count){detail}"
    )]
    Shape {
        /// The entry's index.
        timer: usize,
        /// What is missing or extra.
        detail: String,
    },
    /// `longer_than` or `within` is not a duration.
    #[error("fleet.timers[{timer}].{field}: {why}")]
    Duration {
        /// The entry's index.
        timer: usize,
        /// `longer_than` or `within`.
        field: &'static str,
        /// Why it is not a duration.
        #[source]
        why: DurationError,
    },
    /// A duration of nothing (every job would fire) or of more than 90 days.
    #[error("fleet.timers[{timer}].{field}: from 1s to 90 days")]
    OutOfRange {
        /// The entry's index.
        timer: usize,
        /// `longer_than` or `within`.
        field: &'static str,
        /// The duration given, in seconds.
        seconds: u64,
    },
    /// `more_than` above what a job's counted times are kept for.
    #[error("fleet.timers[{timer}].more_than: at most {MAX_MORE_THAN}")]
    TooManyTimes {
        /// The entry's index.
        timer: usize,
        /// The number given.
        given: u32,
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
        let measure = measure(timer, spec)?;
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
            measure,
            clusters: spec.clusters.clone(),
            namespaces: spec.namespaces.clone(),
            kinds: spec.kinds.clone(),
        });
    }
    Ok(timers)
}

/// What entry `timer` fires on: a stay or a count, whichever its fields give.
fn measure(timer: usize, spec: &TimerSpec) -> Result<Measure, TimerError> {
    let seconds = |field: &'static str, given: &AfterFinished| {
        let seconds = given
            .duration()
            .map_err(|why| TimerError::Duration { timer, field, why })?
            .as_secs();
        if (1..=MAX_LONGER_THAN_SECONDS).contains(&seconds) {
            Ok(seconds as u32)
        } else {
            Err(TimerError::OutOfRange {
                timer,
                field,
                seconds,
            })
        }
    };
    let shape = |detail: &str| TimerError::Shape {
        timer,
        detail: detail.to_string(),
    };
    let stay = spec.state.is_some() || spec.longer_than.is_some();
    let count = spec.counts.is_some() || spec.more_than.is_some() || spec.within.is_some();
    match (stay, count) {
        (true, true) => Err(shape(": this one has fields of both")),
        (false, false) => Err(shape("")),
        (true, false) => {
            let (Some(state), Some(longer_than)) = (spec.state, &spec.longer_than) else {
                return Err(shape(": `state` and `longer_than` go together"));
            };
            Ok(Measure::Stay {
                state,
                longer_than: seconds("longer_than", longer_than)?,
            })
        }
        (false, true) => {
            let (Some(counted), Some(more_than), Some(within)) =
                (spec.counts, spec.more_than, &spec.within)
            else {
                return Err(shape(": `counts`, `more_than` and `within` go together"));
            };
            if more_than > MAX_MORE_THAN {
                return Err(TimerError::TooManyTimes {
                    timer,
                    given: more_than,
                });
            }
            Ok(Measure::Count {
                counted,
                more_than,
                within: seconds("within", within)?,
            })
        }
    }
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
        assert_eq!(
            timers[0].measure,
            Measure::Stay {
                state: TimedState::Queued,
                longer_than: 7200
            }
        );
        let counting = parse("[{name: often, counts: preempted, more_than: 3, within: 1h}]");
        assert_eq!(
            validate(&counting, &kinds, &[]).expect("valid")[0].measure,
            Measure::Count {
                counted: Counted::Preempted,
                more_than: 3,
                within: 3600
            }
        );
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
                "[{name: a, state: pending}]",
                &[],
                "fleet.timers[0]: give either",
            ),
            ("[{name: a}]", &[], "fleet.timers[0]: give either"),
            (
                "[{name: a, state: pending, longer_than: 1m, more_than: 2}]",
                &[],
                "fields of both",
            ),
            (
                "[{name: a, counts: restarted, more_than: 2}]",
                &[],
                "go together",
            ),
            (
                "[{name: a, counts: restarted, more_than: 2, within: 0}]",
                &[],
                "fleet.timers[0].within: from 1s",
            ),
            (
                "[{name: a, counts: restarted, more_than: 101, within: 1h}]",
                &[],
                "fleet.timers[0].more_than: at most 100",
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
