//! Which of a run's events the daemon would hand the plugin: `plugin run`, `plugin test` and
//! `plugin dev` judge each event by the manifest's `kinds`, `filter` and `delivery` before they
//! call the plugin, and report one the daemon would not deliver as skipped, with the reason.
//!
//! The filter is the daemon's own ([`Filter::verdict`], `jobrelay_lanes::filter`), and so is
//! the delivery mode ([`DeliveryMode::decide`], `jobrelay_lanes::mode`), judged per job over
//! the run's events in order, as a lane judges the versions it observes. Where the daemon
//! knows more than a file of events says, the run reads it from the events:
//!
//! - **the kind's name** — the daemon knows which configured kind it watched an event under;
//!   here an event is of the built-in kind whose API version and kind it carries, and one of
//!   no built-in kind is of the first non-built-in kind the manifest lists (if any);
//! - **what was delivered before a job's first event of the run** — its `previous_phase`, which
//!   the daemon sets to the phase of the version it delivered before: `transitions` skips a
//!   first event whose phase is its `previous_phase`, `terminal` one after an end;
//! - **the same event again** (the same id) is called again, as a restart or a dead-letter
//!   replay of the daemon calls it, and is not judged by the mode a second time.
//!
//! `latest` skips nothing here: no version waits behind a call, so none is replaced.
//!
//! A fleet event (its carrier, [`jobrelay_contract::fleet`]) is judged as a lane judges it:
//! by the manifest's `fleet_events` (`clusters`, `rules`) and by the subject's state, never by
//! the kinds, filter and delivery, which are for jobs: a state the run delivered last is not
//! delivered again, and a subject's first event of the run is delivered only if it is news
//! (offline or firing; a cluster back online that was never offline is none).

use std::collections::HashMap;
use std::fmt;

use jobrelay_contract::event::{JobEvent, JobKey, Phase};
use jobrelay_contract::fleet;
use jobrelay_lanes::filter::{Exclude, Filter, FilterError, FilterSpec, Verdict};
use jobrelay_lanes::mode::{Accepted, Decision, DeliveryMode, SkipReason, is_end};
use jobrelay_lanes::settings::FleetEvents;
use jobrelay_watch::kinds::JobKind;

use crate::config::manifest::{FleetEventSort, PluginManifest};

/// A manifest whose selection cannot be used as written (the daemon refuses it too).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectionError {
    #[error("filter.kinds: give the kinds once, in `kinds` or in `filter.kinds`")]
    KindsTwice,
    #[error(transparent)]
    Filter(#[from] FilterError),
}

/// Why an event is not delivered to the plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skip {
    /// The manifest's field that decided: `kinds` (or `filter.kinds`), `filter.clusters`,
    /// `filter.exclude.clusters`, `filter.namespaces`, `filter.exclude.namespaces`,
    /// `filter.labels`, `filter.phases`, `filter.expression`, `delivery`, or for a fleet
    /// event `fleet_events`.
    pub by: &'static str,
    /// What it said, for people.
    pub reason: String,
}

impl fmt::Display for Skip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.by, self.reason)
    }
}

/// The manifest's `kinds`, `filter` and `delivery`, with what the run delivered so far.
pub struct Selection {
    /// `--all`: every event is called, nothing judged.
    all: bool,
    kinds: Vec<String>,
    kinds_field: &'static str,
    filter: Filter,
    mode: DeliveryMode,
    /// The fleet events the manifest asks for.
    fleet: FleetEvents,
    /// Per job (and per fleet subject): what the mode accepted, as a lane keeps it.
    accepted: HashMap<JobKey, Accepted>,
    builtins: Vec<JobKind>,
}

impl Selection {
    /// Every event, judged by nothing (`--all`).
    pub fn all() -> Selection {
        Selection {
            all: true,
            ..Selection::new("kinds", Vec::new(), Filter::all(), DeliveryMode::default())
        }
    }

    /// What a manifest that says nothing of kinds, filter and delivery selects (a run
    /// without a manifest): every kind and job, every version (`every-version`).
    pub fn unconfigured() -> Selection {
        Selection::new("kinds", Vec::new(), Filter::all(), DeliveryMode::default())
    }

    /// The selection `manifest` makes, checked as the daemon checks it (but the kinds, which
    /// only a main file defines).
    pub fn of(manifest: &PluginManifest) -> Result<Selection, SelectionError> {
        let (kinds_field, kinds) = match (&manifest.kinds[..], &manifest.filter.kinds[..]) {
            (_, []) => ("kinds", manifest.kinds.clone()),
            ([], filtered) => ("filter.kinds", filtered.to_vec()),
            _ => return Err(SelectionError::KindsTwice),
        };
        let filter = Filter::new(manifest.filter.clone())?;
        Ok(Selection {
            fleet: FleetEvents {
                clusters: manifest.fleet_events.contains(&FleetEventSort::Clusters),
                rules: manifest.fleet_events.contains(&FleetEventSort::Rules),
            },
            ..Selection::new(kinds_field, kinds, filter, manifest.delivery)
        })
    }

    fn new(
        kinds_field: &'static str,
        kinds: Vec<String>,
        filter: Filter,
        mode: DeliveryMode,
    ) -> Selection {
        Selection {
            all: false,
            kinds,
            kinds_field,
            filter,
            mode,
            fleet: FleetEvents::default(),
            accepted: HashMap::new(),
            builtins: JobKind::BUILTINS
                .iter()
                .filter_map(|name| JobKind::builtin(name))
                .collect(),
        }
    }

    /// Whether the manifest asks for fleet events, so the component must export
    /// `handle-fleet` (the daemon refuses it otherwise).
    pub fn asks_for_fleet_events(&self) -> bool {
        self.fleet.any()
    }

    /// Whether anything is judged (not `--all`).
    pub fn judges(&self) -> bool {
        !self.all
    }

    /// Whether the plugin is called with `event`, the run's next one: `None` to call it, or
    /// why the daemon would not deliver it. Events must come in the run's order.
    pub fn judge(&mut self, event: &JobEvent) -> Option<Skip> {
        if self.all {
            return None;
        }
        if fleet::is_fleet(event) {
            return self.judge_fleet(event);
        }
        let kind = match self.kind(event) {
            Ok(kind) => kind,
            Err(skip) => return Some(skip),
        };
        match self.filter.verdict(event, &kind) {
            Verdict::Take => {}
            Verdict::NotJob => {
                // The daemon lets go of a job its filter no longer takes: it starts afresh if
                // it is taken again.
                self.accepted.remove(&event.job_key());
                return Some(self.not_job(event));
            }
            Verdict::NotEvent => return Some(self.not_event(event)),
            Verdict::Failed(why) => {
                return Some(Skip {
                    by: "filter.expression",
                    reason: format!(
                        "`{}` failed on this event: {why} (the daemon does not deliver it and \
                         counts it in jobrelay_events_filter_errors_total)",
                        self.expression()
                    ),
                });
            }
        }
        let accepted = self
            .accepted
            .entry(event.job_key())
            .or_insert_with(|| before(event));
        if accepted.resource_version.as_deref() == Some(event.resource_version.as_str()) {
            return None;
        }
        let seen = accepted.phase;
        match self.mode.decide(accepted, event, |_| false) {
            Decision::Append | Decision::Replace => None,
            Decision::Skip(why) => Some(Skip {
                by: "delivery",
                reason: skipped_by_mode(self.mode, why, event.phase, seen),
            }),
        }
    }

    /// A fleet event, as a lane judges one (`Lane::push_fleet`): asked for, and news.
    fn judge_fleet(&mut self, event: &JobEvent) -> Option<Skip> {
        let (sort, asked) = if fleet::is_rule(event) {
            ("a rule's", self.fleet.rules)
        } else {
            ("a cluster's", self.fleet.clusters)
        };
        if !asked {
            return Some(Skip {
                by: "fleet_events",
                reason: format!(
                    "the manifest does not ask for {sort} fleet events (fleet_events: [{}])",
                    [
                        ("clusters", self.fleet.clusters),
                        ("rules", self.fleet.rules)
                    ]
                    .into_iter()
                    .filter_map(|(name, on)| on.then_some(name))
                    .collect::<Vec<_>>()
                    .join(", ")
                ),
            });
        }
        let accepted = self.accepted.entry(event.job_key()).or_default();
        if accepted.resource_version.as_deref() == Some(event.resource_version.as_str()) {
            return None;
        }
        let seen = accepted.phase;
        match DeliveryMode::FleetStates.decide(accepted, event, |_| false) {
            Decision::Append | Decision::Replace => None,
            Decision::Skip(_) => {
                let state = event.reason.as_deref().unwrap_or(event.raw_phase.as_str());
                let why = match seen {
                    Some(_) => format!("{state} after {state}: the state did not change"),
                    None => format!(
                        "{state} with nothing delivered before it: a good state is news only \
                         after a bad one"
                    ),
                };
                Some(Skip {
                    by: "fleet_events",
                    reason: format!("{why} (the daemon delivers a fleet subject's changes)"),
                })
            }
        }
    }

    /// The configured kind name of `event` (what the filter's expression reads as
    /// `event.kind`), or why the manifest's kinds do not take it.
    fn kind(&self, event: &JobEvent) -> Result<String, Skip> {
        let builtin = self
            .builtins
            .iter()
            .find(|k| k.kind == event.kind && k.api_version() == event.api_version)
            .map(|k| k.name.clone());
        if self.kinds.is_empty() {
            return Ok(builtin.unwrap_or_else(|| event.kind.clone()));
        }
        let skip = |what: String| Skip {
            by: self.kinds_field,
            reason: format!("the manifest takes {}, {what}", list(&self.kinds)),
        };
        match builtin {
            Some(name) if self.kinds.contains(&name) => Ok(name),
            Some(name) => Err(skip(format!(
                "not {name} ({} {})",
                event.api_version, event.kind
            ))),
            None => self
                .kinds
                .iter()
                .find(|k| JobKind::builtin(k).is_none())
                .cloned()
                .ok_or_else(|| {
                    skip(format!(
                        "not {} {}, which is no built-in kind",
                        event.api_version, event.kind
                    ))
                }),
        }
    }

    /// Which part of the job level refused the job: its cluster, its namespace or its labels.
    fn not_job(&self, event: &JobEvent) -> Skip {
        let spec = self.filter.spec();
        let place = |clusters: &[String], namespaces: &[String], exclude: Exclude| {
            let part = FilterSpec {
                clusters: clusters.to_vec(),
                namespaces: namespaces.to_vec(),
                exclude,
                ..FilterSpec::default()
            };
            // Parts of a filter that compiled compile.
            match Filter::new(part) {
                Ok(filter) => filter.takes_place(event),
                Err(_) => true,
            }
        };
        let none = Exclude::default;
        let cluster = format!("the cluster `{}`", event.cluster);
        let namespace = format!("the namespace `{}`", event.namespace);
        if !place(&spec.clusters, &[], none()) {
            return refused("filter.clusters", &spec.clusters, &cluster);
        }
        let excluded = Exclude {
            clusters: spec.exclude.clusters.clone(),
            namespaces: Vec::new(),
        };
        if !place(&[], &[], excluded) {
            return excluded_by("filter.exclude.clusters", &spec.exclude.clusters, &cluster);
        }
        if !place(&[], &spec.namespaces, none()) {
            return refused("filter.namespaces", &spec.namespaces, &namespace);
        }
        let excluded = Exclude {
            clusters: Vec::new(),
            namespaces: spec.exclude.namespaces.clone(),
        };
        if !place(&[], &[], excluded) {
            return excluded_by(
                "filter.exclude.namespaces",
                &spec.exclude.namespaces,
                &namespace,
            );
        }
        let labels = if event.labels.is_empty() {
            "none".to_string()
        } else {
            event
                .labels
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(",")
        };
        Skip {
            by: "filter.labels",
            reason: format!(
                "the job's labels ({labels}) do not match `{}`",
                spec.labels.as_deref().unwrap_or_default()
            ),
        }
    }

    /// Which part of the event level refused the version: its phase or the expression.
    fn not_event(&self, event: &JobEvent) -> Skip {
        let phases = &self.filter.spec().phases;
        if !phases.is_empty() && !phases.contains(&event.phase) {
            return Skip {
                by: "filter.phases",
                reason: format!("the filter takes {}, not {}", list(phases), event.phase),
            };
        }
        Skip {
            by: "filter.expression",
            reason: format!("`{}` is false for this event", self.expression()),
        }
    }

    fn expression(&self) -> &str {
        self.filter.spec().expression.as_deref().unwrap_or_default()
    }
}

/// What a lane would hold for a job whose first event of the run is `event`: the phase of the
/// version delivered before it, which its `previous_phase` says.
fn before(event: &JobEvent) -> Accepted {
    let phase = event.previous_phase;
    Accepted {
        phase,
        terminal_done: phase.is_some_and(is_end),
        deleted: phase == Some(Phase::Deleted),
        ..Accepted::default()
    }
}

fn skipped_by_mode(
    mode: DeliveryMode,
    why: SkipReason,
    phase: Phase,
    seen: Option<Phase>,
) -> String {
    let name = match mode {
        DeliveryMode::EveryVersion => "every-version",
        DeliveryMode::Transitions => "transitions",
        DeliveryMode::Terminal => "terminal",
        DeliveryMode::Latest => "latest",
        DeliveryMode::FleetStates => "fleet states",
    };
    let why = match why {
        SkipReason::Duplicate => "this version was delivered already".to_string(),
        SkipReason::AfterDeletion => {
            "the job's deletion was delivered already: nothing of it comes after".to_string()
        }
        SkipReason::SamePhase => format!(
            "the phase did not change ({phase} after {})",
            seen.unwrap_or(phase)
        ),
        SkipReason::NotTerminal if is_end(phase) => {
            format!("{phase}, but the job's end was delivered already")
        }
        SkipReason::NotTerminal => {
            format!("{phase} is no end (succeeded, failed, terminating) and not the deletion")
        }
    };
    format!("{name}: {why}")
}

fn refused(by: &'static str, patterns: &[String], what: &str) -> Skip {
    Skip {
        by,
        reason: format!("the filter takes {}, not {what}", list(patterns)),
    }
}

fn excluded_by(by: &'static str, patterns: &[String], what: &str) -> Skip {
    Skip {
        by,
        reason: format!("{what} is excluded ({})", list(patterns)),
    }
}

fn list(items: &[impl fmt::Display]) -> String {
    let items: Vec<String> = items.iter().map(ToString::to_string).collect();
    format!("[{}]", items.join(", "))
}

#[cfg(test)]
mod tests;
