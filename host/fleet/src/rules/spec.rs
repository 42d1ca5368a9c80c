//! The main file's `fleet:` section: rules on the job SLIs, whose firing and resolving are
//! fleet events. Checked here against the watched kinds and made the [`Rule`]s this module's
//! parent judges, with the interval they are evaluated at ([`FleetSettings`], which the
//! daemon's rule book takes). A rule's `for` and `window` are written as the clean-up's
//! durations ([`AfterFinished`]).

use serde::{Deserialize, Serialize};

use super::{Measure, Per, Rule};
use crate::cleanup::{AfterFinished, DurationError};
use crate::timers::spec::{TimerError, TimerSpec};
use crate::timers::{self, Timer};

/// The `fleet:` section as written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetSpec {
    /// Time between two evaluations of the rules, in milliseconds (default 15,000).
    #[serde(default = "default_evaluate_interval_ms")]
    pub evaluate_interval_ms: u64,
    /// The rules, each judged on every cluster.
    #[serde(default)]
    pub rules: Vec<FleetRuleSpec>,
    /// Timers on how long one job stays in a state, judged at the same interval.
    #[serde(default)]
    pub timers: Vec<TimerSpec>,
}

impl Default for FleetSpec {
    fn default() -> FleetSpec {
        FleetSpec {
            evaluate_interval_ms: default_evaluate_interval_ms(),
            rules: Vec::new(),
            timers: Vec::new(),
        }
    }
}

fn default_evaluate_interval_ms() -> u64 {
    15_000
}

/// One `fleet.rules` entry as written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetRuleSpec {
    /// The rule's name, unique in the main file; fleet events and metrics carry it.
    pub name: String,
    /// The SLI the rule measures.
    pub measure: Measure,
    /// The rule holds while the measure is above this.
    pub above: f64,
    /// How long the condition must hold before the rule fires (default 0: at once).
    #[serde(default, rename = "for")]
    pub for_: Option<AfterFinished>,
    /// The trailing window the measure is taken over (default 10m).
    #[serde(default)]
    pub window: Option<AfterFinished>,
    /// Jobs in the window below which there is no verdict (default 5).
    #[serde(default = "default_min_jobs")]
    pub min_jobs: u64,
    /// Cluster name patterns (`*` and `?`); empty: every cluster.
    #[serde(default)]
    pub clusters: Vec<String>,
    /// Namespaces (empty: all); `other` names those past a cluster's cap of labelled ones.
    #[serde(default)]
    pub namespaces: Vec<String>,
    /// Configured kind names (empty: all).
    #[serde(default)]
    pub kinds: Vec<String>,
    /// For `admission_wait_p95` and `preemptions_per_hour`: the ClusterQueue name patterns
    /// judged (empty: every one, each on its own).
    #[serde(default)]
    pub cluster_queues: Vec<String>,
    /// For `failures_per_hour`: the failure causes judged (empty: every one, each on its own).
    #[serde(default)]
    pub causes: Vec<String>,
}

fn default_min_jobs() -> u64 {
    5
}

/// The most rules the `fleet:` section may hold (each is judged on every cluster).
const MAX_FLEET_RULES: usize = 100;
/// The longest `for` or `window` of a rule: a day.
const MAX_RULE_SECONDS: u64 = 86_400;

/// Whether `name` can name a rule or a timer: 1-63 characters of a-z, 0-9 and `-`, so it is
/// a label value of its events and metrics.
pub(crate) fn is_label_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// The `fleet:` section after validation.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FleetSettings {
    /// Time between two evaluations of the rules.
    pub evaluate_interval: std::time::Duration,
    /// The rules, checked, in the order written.
    pub rules: Vec<Rule>,
    /// The timers, checked, in the order written.
    pub timers: Vec<Timer>,
}

/// Why the `fleet:` section is refused; the message names the field (`rule` is the index of
/// the rule in `fleet.rules`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FleetError {
    /// The interval is below 100 ms (a busy loop) or above 10 minutes (no verdict in time).
    #[error("fleet.evaluate_interval_ms: between 100 and 600000 (10 minutes)")]
    EvaluateInterval {
        /// The interval given, in milliseconds.
        given: u64,
    },
    /// More rules than every cluster can be judged on.
    #[error("fleet.rules: at most {} rules", MAX_FLEET_RULES)]
    TooManyRules {
        /// The number of rules given.
        given: usize,
    },
    /// A name that cannot be a label value of the rule's events and metrics.
    #[error("fleet.rules[{rule}].name: `{name}` must be 1-63 characters of a-z, 0-9 and -")]
    BadName {
        /// The rule's index.
        rule: usize,
        /// The name as written.
        name: String,
    },
    /// Two rules with one name: their events could not be told apart.
    #[error("fleet.rules[{rule}].name: `{name}` is used twice")]
    NameTwice {
        /// The index of the second rule with the name.
        rule: usize,
        /// The name.
        name: String,
    },
    /// Not a finite number, or below 0.
    #[error("fleet.rules[{rule}].above: a number of at least 0")]
    BadAbove {
        /// The rule's index.
        rule: usize,
        /// The figure as written.
        above: f64,
    },
    /// A failure ratio above a figure it can never pass.
    #[error(
        "fleet.rules[{rule}].above: a failure ratio is at most 1, so it can never be above {above}"
    )]
    RatioNeverAbove {
        /// The rule's index.
        rule: usize,
        /// The figure as written.
        above: f64,
    },
    /// `for` or `window` is not a duration.
    #[error("fleet.rules[{rule}].{field}: {why}")]
    Duration {
        /// The rule's index.
        rule: usize,
        /// `for` or `window`.
        field: &'static str,
        /// Why it is not a duration.
        #[source]
        why: DurationError,
    },
    /// `for` or `window` is longer than a day.
    #[error("fleet.rules[{rule}].{field}: at most a day")]
    OverADay {
        /// The rule's index.
        rule: usize,
        /// `for` or `window`.
        field: &'static str,
        /// The duration given, in seconds.
        seconds: u64,
    },
    /// A window of nothing, over which no job ends.
    #[error("fleet.rules[{rule}].window: at least 1s")]
    NoWindow {
        /// The rule's index.
        rule: usize,
    },
    /// No jobs needed for a verdict: one job would decide it.
    #[error("fleet.rules[{rule}].min_jobs: at least 1")]
    NoMinJobs {
        /// The rule's index.
        rule: usize,
    },
    /// A kind the main file does not watch, so the rule would never see its jobs.
    #[error("fleet.rules[{rule}].kinds: `{kind}` is not a configured kind")]
    UnknownKind {
        /// The rule's index.
        rule: usize,
        /// The kind as written.
        kind: String,
    },
    /// `cluster_queues` or `causes` on a measure not judged per cluster queue or per cause.
    #[error("fleet.rules[{rule}].{field}: only for {measures}")]
    GroupsNotJudged {
        /// The rule's index.
        rule: usize,
        /// `cluster_queues` or `causes`.
        field: &'static str,
        /// The measures that take it.
        measures: &'static str,
    },
    /// A timer is refused (the message names its field).
    #[error(transparent)]
    Timer(#[from] TimerError),
}

impl FleetSpec {
    /// The rules and their interval, checked against the configured kinds' names; or the
    /// first field at fault.
    pub fn validate(&self, kind_names: &[&str]) -> Result<FleetSettings, FleetError> {
        if !(100..=600_000).contains(&self.evaluate_interval_ms) {
            return Err(FleetError::EvaluateInterval {
                given: self.evaluate_interval_ms,
            });
        }
        if self.rules.len() > MAX_FLEET_RULES {
            return Err(FleetError::TooManyRules {
                given: self.rules.len(),
            });
        }
        let mut rules: Vec<Rule> = Vec::new();
        for (rule, spec) in self.rules.iter().enumerate() {
            if !is_label_name(&spec.name) {
                return Err(FleetError::BadName {
                    rule,
                    name: spec.name.clone(),
                });
            }
            if rules.iter().any(|r| r.name == spec.name) {
                return Err(FleetError::NameTwice {
                    rule,
                    name: spec.name.clone(),
                });
            }
            if !spec.above.is_finite() || spec.above < 0.0 {
                return Err(FleetError::BadAbove {
                    rule,
                    above: spec.above,
                });
            }
            if spec.measure == Measure::FailureRatio && spec.above >= 1.0 {
                return Err(FleetError::RatioNeverAbove {
                    rule,
                    above: spec.above,
                });
            }
            let seconds = |field: &'static str, value: &Option<AfterFinished>, default: u64| {
                let secs = match value {
                    Some(v) => v
                        .duration()
                        .map_err(|why| FleetError::Duration { rule, field, why })?
                        .as_secs(),
                    None => default,
                };
                if secs > MAX_RULE_SECONDS {
                    return Err(FleetError::OverADay {
                        rule,
                        field,
                        seconds: secs,
                    });
                }
                Ok(secs as u32)
            };
            let for_seconds = seconds("for", &spec.for_, 0)?;
            let window_seconds = seconds("window", &spec.window, 600)?;
            if window_seconds == 0 {
                return Err(FleetError::NoWindow { rule });
            }
            if spec.min_jobs == 0 {
                return Err(FleetError::NoMinJobs { rule });
            }
            if let Some(kind) = spec
                .kinds
                .iter()
                .find(|k| !kind_names.contains(&k.as_str()))
            {
                return Err(FleetError::UnknownKind {
                    rule,
                    kind: kind.clone(),
                });
            }
            let per = spec.measure.per();
            if !spec.cluster_queues.is_empty() && per != Per::ClusterQueue {
                return Err(FleetError::GroupsNotJudged {
                    rule,
                    field: "cluster_queues",
                    measures: "admission_wait_p95 and preemptions_per_hour",
                });
            }
            if !spec.causes.is_empty() && per != Per::Cause {
                return Err(FleetError::GroupsNotJudged {
                    rule,
                    field: "causes",
                    measures: "failures_per_hour",
                });
            }
            let groups = match per {
                Per::Cluster => Vec::new(),
                Per::ClusterQueue => spec.cluster_queues.clone(),
                Per::Cause => spec.causes.clone(),
            };
            rules.push(Rule {
                groups,
                name: spec.name.clone(),
                measure: spec.measure,
                above: spec.above,
                for_seconds,
                window_seconds,
                min_jobs: spec.min_jobs,
                clusters: spec.clusters.clone(),
                namespaces: spec.namespaces.clone(),
                kinds: spec.kinds.clone(),
            });
        }
        let names: Vec<&str> = rules.iter().map(|r| r.name.as_str()).collect();
        let timers = timers::spec::validate(&self.timers, kind_names, &names)?;
        Ok(FleetSettings {
            evaluate_interval: std::time::Duration::from_millis(self.evaluate_interval_ms),
            rules,
            timers,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fleet(yaml: &str) -> Result<FleetSettings, FleetError> {
        let spec: FleetSpec = serde_yaml_ng::from_str(yaml).expect("the section parses");
        spec.validate(&["batch-job"])
    }

    #[test]
    fn groups_go_with_the_measures_judged_per_one() {
        let settings = fleet(
            "rules:\n\
             - {name: a100-wait, measure: admission_wait_p95, above: 3600, cluster_queues: [a100*]}\n\
             - {name: oom, measure: failures_per_hour, above: 5, causes: [OOMKilled]}\n",
        )
        .expect("valid");
        assert_eq!(settings.rules[0].groups, ["a100*"]);
        assert_eq!(settings.rules[1].groups, ["OOMKilled"]);
        let refused =
            fleet("rules:\n- {name: r, measure: failure_ratio, above: 0.1, cluster_queues: [a]}\n")
                .expect_err("no queues on a ratio");
        assert_eq!(
            refused.to_string(),
            "fleet.rules[0].cluster_queues: only for admission_wait_p95 and preemptions_per_hour"
        );
        let refused = fleet(
            "rules:\n- {name: r, measure: preemptions_per_hour, above: 1, causes: [OOMKilled]}\n",
        )
        .expect_err("no causes on preemptions");
        assert_eq!(
            refused.to_string(),
            "fleet.rules[0].causes: only for failures_per_hour"
        );
    }
}
