//! Fleet rules: conditions on the job SLIs of a cluster, judged at every evaluation, that fire
//! once they have held for a while and resolve when they stop holding — "more than 15% of
//! the batch jobs on a cluster failed over the last 10 minutes, for 2 minutes".
//!
//! A rule measures one SLI over a trailing `window` on each cluster, from the jobs of the
//! kinds and namespaces it names: the share of ended jobs that failed, or the 95th percentile
//! of queue wait or run time. The measures a job's story makes possible are judged per group
//! within a cluster, each group a verdict of its own: Kueue's admission wait and the
//! preemptions per hour per ClusterQueue, the failures per hour per first failure cause. The SLIs are counters that only grow ([`crate::sli`]), so the
//! window's figure is the difference between the counters now and at the evaluation closest
//! to `window` ago; percentiles come from the difference of the histograms' buckets,
//! interpolated within the bucket as Prometheus's `histogram_quantile` does. Fewer than
//! `min_jobs` jobs in the window is no verdict at all: the rule keeps what it said, so a quiet
//! hour neither fires nor resolves anything.
//!
//! The first verdict after the process starts is reported whichever it is (see
//! [`crate::availability`] for why: the lanes remember what was delivered, and turn a first
//! "resolved" into news only when it ends a firing delivered before).
//!
//! A pure state machine: no I/O, no clock; the caller passes the time and the SLIs.
//!
//! [`spec`] is the main file's `fleet:` section, checked against the configured kinds into
//! these rules and the interval they are judged at.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use wildmatch::WildMatch;

use crate::sli::{BUCKETS, OTHER, SliRow};

pub mod spec;

/// What a rule measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Measure {
    /// Failed jobs / ended jobs (a ratio, 0 to 1).
    FailureRatio,
    /// 95th percentile of the time from creation to first running, seconds.
    QueueWaitP95,
    /// 95th percentile of the time from first running to the end, seconds.
    RunTimeP95,
    /// 95th percentile of Kueue's wait to admission (from the last requeue, else the
    /// Workload's creation), seconds, per ClusterQueue.
    AdmissionWaitP95,
    /// Preemptions of Workloads per hour, per ClusterQueue.
    PreemptionsPerHour,
    /// Failed jobs per hour, per first failure cause (`OOMKilled`, `ImagePullBackOff`, …).
    FailuresPerHour,
}

/// What a measure is judged per within a cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Per {
    /// The whole cluster: one verdict.
    Cluster,
    /// Each Kueue ClusterQueue.
    ClusterQueue,
    /// Each first failure cause.
    Cause,
}

impl Measure {
    /// The measure in words, with its unit, as a rule's summary line shows it.
    pub fn describe(self) -> &'static str {
        match self {
            Measure::FailureRatio => "job failure ratio",
            Measure::QueueWaitP95 => "p95 queue wait (s)",
            Measure::RunTimeP95 => "p95 run time (s)",
            Measure::AdmissionWaitP95 => "p95 Kueue admission wait (s)",
            Measure::PreemptionsPerHour => "preemptions per hour",
            Measure::FailuresPerHour => "failures per hour",
        }
    }

    /// What the measure is judged per.
    pub fn per(self) -> Per {
        match self {
            Measure::FailureRatio | Measure::QueueWaitP95 | Measure::RunTimeP95 => Per::Cluster,
            Measure::AdmissionWaitP95 | Measure::PreemptionsPerHour => Per::ClusterQueue,
            Measure::FailuresPerHour => Per::Cause,
        }
    }

    /// Whether the measure is a count per hour: it has a value over any window, jobs or
    /// not, so `min_jobs` does not apply and a quiet window reads 0 (and resolves).
    fn is_rate(self) -> bool {
        matches!(self, Measure::PreemptionsPerHour | Measure::FailuresPerHour)
    }

    fn has_histogram(self) -> bool {
        matches!(
            self,
            Measure::QueueWaitP95 | Measure::RunTimeP95 | Measure::AdmissionWaitP95
        )
    }
}

/// One rule, checked (main file `fleet.rules`).
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    /// The rule's name, unique in the main file; fleet events and metrics carry it.
    pub name: String,
    /// The SLI the rule measures.
    pub measure: Measure,
    /// The rule holds while the measure is above this.
    pub above: f64,
    /// How long it must hold before it fires (0: at the first evaluation it holds).
    pub for_seconds: u32,
    /// The trailing window the measure is taken over.
    pub window_seconds: u32,
    /// Jobs in the window (ended ones for the failure ratio and run time, started ones for
    /// queue wait) below which there is no verdict.
    pub min_jobs: u64,
    /// Cluster name patterns (`*` and `?`); empty: every cluster.
    pub clusters: Vec<String>,
    /// Namespaces (empty: all). Past a cluster's cap of labelled namespaces, jobs count under
    /// `other` ([`crate::sli`]), which a rule can name.
    pub namespaces: Vec<String>,
    /// Configured kind names (empty: all).
    pub kinds: Vec<String>,
    /// For a measure judged per cluster queue, queue name patterns (`*` and `?`); per cause,
    /// the causes. Empty: every one, each judged on its own.
    pub groups: Vec<String>,
}

/// What one SLI row adds to a rule's tally of one group: ends, a histogram, a count.
struct Part<'r> {
    succeeded: u64,
    failed: u64,
    histogram: Option<&'r crate::sli::HistogramSnapshot>,
    events: u64,
}

impl Rule {
    /// What `row` adds to each group the rule judges: one part for the whole cluster (group
    /// `""`), else one per cluster queue or cause the row has that the rule names.
    fn parts<'r>(&self, row: &'r SliRow) -> Vec<(&'r str, Part<'r>)> {
        let named = |group: &str| {
            self.groups.is_empty()
                || match self.measure.per() {
                    Per::ClusterQueue => {
                        self.groups.iter().any(|p| WildMatch::new(p).matches(group))
                    }
                    _ => self.groups.iter().any(|g| g == group),
                }
        };
        match self.measure {
            Measure::FailureRatio | Measure::QueueWaitP95 | Measure::RunTimeP95 => {
                let histogram = match self.measure {
                    Measure::QueueWaitP95 => Some(&row.queue_wait),
                    Measure::RunTimeP95 => Some(&row.run),
                    _ => None,
                };
                vec![(
                    "",
                    Part {
                        succeeded: row.succeeded,
                        failed: row.failed,
                        histogram,
                        events: 0,
                    },
                )]
            }
            Measure::AdmissionWaitP95 | Measure::PreemptionsPerHour => row
                .queues
                .iter()
                .filter(|q| named(&q.queue))
                .map(|q| {
                    let wait = self.measure == Measure::AdmissionWaitP95;
                    let part = Part {
                        succeeded: 0,
                        failed: 0,
                        histogram: wait.then_some(&q.admission_wait),
                        events: if wait { 0 } else { q.preemptions },
                    };
                    (q.queue.as_str(), part)
                })
                .collect(),
            Measure::FailuresPerHour => row
                .failed_by_cause
                .iter()
                .filter(|(cause, _)| named(cause))
                .map(|(cause, n)| {
                    let part = Part {
                        succeeded: 0,
                        failed: 0,
                        histogram: None,
                        events: *n,
                    };
                    (cause.as_str(), part)
                })
                .collect(),
        }
    }

    fn covers(&self, row: &SliRow) -> bool {
        (self.clusters.is_empty()
            || self
                .clusters
                .iter()
                .any(|p| WildMatch::new(p).matches(&row.cluster)))
            && (self.namespaces.is_empty() || self.namespaces.contains(&row.namespace))
            && (self.kinds.is_empty() || self.kinds.contains(&row.kind))
    }

    /// The one line a fleet event carries, e.g. `job failure ratio 0.31 > 0.15 for 120s
    /// over 600s on east`; `group` is the cluster queue or cause judged ("" for none).
    pub fn summary(&self, cluster: &str, group: &str, value: f64, firing: bool) -> String {
        let relation = if firing { ">" } else { "<=" };
        let mut scope = String::new();
        match self.measure.per() {
            Per::Cluster => {}
            Per::ClusterQueue => scope.push_str(&format!(", cluster queue {group}")),
            Per::Cause => scope.push_str(&format!(", cause {group}")),
        }
        if !self.kinds.is_empty() {
            scope.push_str(&format!(", kinds: {}", self.kinds.join(", ")));
        }
        if !self.namespaces.is_empty() {
            scope.push_str(&format!(", namespaces: {}", self.namespaces.join(", ")));
        }
        let held = if firing && self.for_seconds > 0 {
            format!(" for {}s", self.for_seconds)
        } else {
            String::new()
        };
        format!(
            "rule {}: {} {} {} {}{held} over the last {}s on {cluster}{scope}",
            self.name,
            self.measure.describe(),
            round(value),
            relation,
            round(self.above),
            self.window_seconds
        )
    }
}

fn round(v: f64) -> String {
    let text = format!("{v:.3}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text.is_empty() {
        "0".to_string()
    } else {
        text.to_string()
    }
}

/// A rule's judgement on one cluster changed.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleChange {
    /// The rule's name.
    pub rule: String,
    /// The cluster it was judged on.
    pub cluster: String,
    /// The cluster queue or cause it was judged on, for a measure judged per one.
    pub group: Option<String>,
    /// Firing (true) or resolved.
    pub firing: bool,
    /// The measure at this evaluation.
    pub value: f64,
    /// The rule's `above`, which the value is judged against.
    pub threshold: f64,
    /// Firing: the first evaluation the condition held at; resolved: this evaluation.
    pub since: i64,
    /// The one line the fleet event carries ([`Rule::summary`]).
    pub summary: String,
}

/// The SLI counters of one rule on one cluster, summed over the rows it covers: only what the
/// rule's measure reads (the window's history keeps one per rule, cluster and evaluation).
#[derive(Debug, Clone, PartialEq)]
struct Tally {
    succeeded: u64,
    failed: u64,
    /// For a count per hour: the count.
    events: u64,
    /// For a percentile: cumulative counts per [`BUCKETS`] bound, as in
    /// [`crate::sli::HistogramSnapshot`], and the total.
    histogram: Option<Box<Histogram>>,
}

#[derive(Debug, Clone, PartialEq)]
struct Histogram {
    cumulative: [u64; BUCKETS.len()],
    count: u64,
}

impl Tally {
    fn new(measure: Measure) -> Tally {
        Tally {
            succeeded: 0,
            failed: 0,
            events: 0,
            histogram: measure.has_histogram().then(|| {
                Box::new(Histogram {
                    cumulative: [0; BUCKETS.len()],
                    count: 0,
                })
            }),
        }
    }

    fn add(&mut self, part: &Part) {
        self.succeeded += part.succeeded;
        self.failed += part.failed;
        self.events += part.events;
        let Some(source) = part.histogram else {
            return;
        };
        if let Some(h) = &mut self.histogram {
            for (slot, (_, n)) in h.cumulative.iter_mut().zip(&source.buckets) {
                *slot += n;
            }
            h.count += source.count;
        }
    }

    /// `self - base`, where every counter of `base` is at most this one's — unless the
    /// series restarted (a cluster let go and taken back), when the whole tally is new.
    fn since(&self, base: &Tally) -> Tally {
        let count = |t: &Tally| t.histogram.as_ref().map_or(0, |h| h.count);
        let grew = self.succeeded >= base.succeeded
            && self.failed >= base.failed
            && self.events >= base.events
            && count(self) >= count(base);
        if !grew {
            return self.clone();
        }
        let histogram = match (&self.histogram, &base.histogram) {
            (Some(now), Some(then)) => {
                let mut h = now.clone();
                for (slot, old) in h.cumulative.iter_mut().zip(&then.cumulative) {
                    *slot = slot.saturating_sub(*old);
                }
                h.count -= then.count;
                Some(h)
            }
            (now, _) => now.clone(),
        };
        Tally {
            succeeded: self.succeeded - base.succeeded,
            failed: self.failed - base.failed,
            events: self.events - base.events,
            histogram,
        }
    }

    /// The rule's measure over this (windowed) tally, if there are enough jobs.
    fn measure(&self, rule: &Rule) -> Option<f64> {
        let (measure, min_jobs) = (rule.measure, rule.min_jobs.max(1));
        if measure.is_rate() {
            let window = f64::from(rule.window_seconds.max(1));
            return Some(self.events as f64 * 3_600.0 / window);
        }
        match measure {
            Measure::FailureRatio => {
                let ended = self.succeeded + self.failed;
                (ended >= min_jobs).then(|| self.failed as f64 / ended as f64)
            }
            _ => {
                let h = self.histogram.as_ref()?;
                quantile(0.95, &h.cumulative, h.count, min_jobs)
            }
        }
    }
}

/// The `q` quantile of a histogram given as cumulative counts per [`BUCKETS`] bound and a
/// total: linear within the bucket the rank falls in (from 0 for the first); the largest
/// bound when it falls above every bound.
fn quantile(q: f64, cumulative: &[u64], count: u64, min_jobs: u64) -> Option<f64> {
    if count < min_jobs || count == 0 {
        return None;
    }
    let rank = q * count as f64;
    let mut below = 0u64;
    let mut lower = 0.0;
    for (bound, at_or_under) in BUCKETS.iter().zip(cumulative) {
        if (*at_or_under as f64) >= rank {
            let inside = at_or_under - below;
            if inside == 0 {
                return Some(*bound);
            }
            let share = (rank - below as f64) / inside as f64;
            return Some(lower + (bound - lower) * share);
        }
        below = *at_or_under;
        lower = *bound;
    }
    BUCKETS.last().copied()
}

/// About how many evaluations the rules keep for their windows' bases.
const KEPT_EVALUATIONS: i64 = 32;

/// A rule's name, a cluster's and the group's within it (`""` for none), shared by every
/// evaluation that keeps a tally of them.
type Key = (Arc<str>, Arc<str>, Arc<str>);

/// One evaluation's tallies, sorted by (rule, cluster, group).
type Tallies = Vec<(Key, Tally)>;

/// What a rule said on one cluster.
#[derive(Debug, Clone, Default)]
struct Verdict {
    /// `None` until the first evaluation with enough jobs.
    firing: Option<bool>,
    /// The first evaluation of the current run of evaluations the condition held at.
    holding_since: Option<i64>,
    /// The last measure taken.
    value: Option<f64>,
}

/// The rules and what they said, per cluster.
#[derive(Debug, Default)]
pub struct Rules {
    rules: Vec<Rule>,
    /// By (rule, cluster, group).
    verdicts: BTreeMap<(String, String, String), Verdict>,
    /// Each evaluation's tallies (time, (rule, cluster) → tally), oldest first, back to the
    /// longest window.
    history: VecDeque<(i64, Tallies)>,
}

/// One rule on one cluster, as read by metrics.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleReading {
    /// The rule's name.
    pub rule: String,
    /// The cluster it was judged on.
    pub cluster: String,
    /// The cluster queue or cause, for a measure judged per one (else empty).
    pub group: String,
    /// Whether the rule fires there; false also before its first verdict.
    pub firing: bool,
    /// The last measure taken; none while no evaluation had enough jobs.
    pub value: Option<f64>,
}

impl Rules {
    /// The rules, with no verdict and no history yet.
    pub fn new(rules: Vec<Rule>) -> Rules {
        Rules {
            rules,
            ..Rules::default()
        }
    }

    /// New rules (the main file changed). A rule whose definition is unchanged keeps its
    /// verdicts; a changed or removed one starts again.
    pub fn set_rules(&mut self, rules: Vec<Rule>) {
        let kept: Vec<&str> = rules
            .iter()
            .filter(|r| self.rules.contains(r))
            .map(|r| r.name.as_str())
            .collect();
        self.verdicts
            .retain(|(rule, _, _), _| kept.contains(&rule.as_str()));
        self.rules = rules;
    }

    /// The rules in force.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// Judges every rule on every cluster the SLI `rows` have, at `now` (seconds): the
    /// verdicts that changed.
    pub fn evaluate(&mut self, rows: &[SliRow], now: i64) -> Vec<RuleChange> {
        // Names shared with the last evaluation's keys where they are the same, so the
        // history holds each name once, not once per evaluation.
        let mut names: BTreeMap<String, Arc<str>> = BTreeMap::new();
        if let Some((_, last)) = self.history.back() {
            for ((rule, cluster, group), _) in last {
                for name in [rule, cluster, group] {
                    names
                        .entry(name.to_string())
                        .or_insert_with(|| name.clone());
                }
            }
        }
        let mut shared = |name: &str| -> Arc<str> {
            if let Some(name) = names.get(name) {
                return name.clone();
            }
            let arc: Arc<str> = Arc::from(name);
            names.insert(name.to_string(), arc.clone());
            arc
        };
        let mut by_key: BTreeMap<Key, Tally> = BTreeMap::new();
        for rule in &self.rules {
            let rule_name = shared(&rule.name);
            for row in rows.iter().filter(|r| rule.covers(r)) {
                let cluster = shared(&row.cluster);
                for (group, part) in rule.parts(row) {
                    by_key
                        .entry((rule_name.clone(), cluster.clone(), shared(group)))
                        .or_insert_with(|| Tally::new(rule.measure))
                        .add(&part);
                }
            }
        }
        let tallies: Tallies = by_key.into_iter().collect();
        let longest = self
            .rules
            .iter()
            .map(|r| i64::from(r.window_seconds))
            .max()
            .unwrap_or(0);
        // Keep one evaluation at or before the longest window's start, as its base.
        while self.history.len() >= 2 && self.history[1].0 <= now - longest {
            self.history.pop_front();
        }
        // And at most about [`KEPT_EVALUATIONS`] of them: a day's window judged every 100 ms
        // would otherwise keep 864,000. The newest is replaced while it is closer than a step
        // to the one before, so a base is at most one step (1/32 of the window) early.
        let step = (longest / KEPT_EVALUATIONS).max(1);
        if self.history.len() >= 2 && now - self.history[self.history.len() - 2].0 < step {
            self.history.pop_back();
        }
        let mut changes = Vec::new();
        for ((rule_name, cluster, group), tally) in &tallies {
            let Some(rule) = self.rules.iter().find(|r| *r.name == **rule_name) else {
                continue;
            };
            let start = now - i64::from(rule.window_seconds);
            // The base: the latest evaluation at or before the window's start; none while
            // the process is younger than the window (the counters started at zero with it,
            // so the whole tally is what the window holds).
            let base = self
                .history
                .iter()
                .rev()
                .find(|(t, _)| *t <= start)
                .and_then(|(_, tallies)| {
                    let at = tallies
                        .binary_search_by(|((r, c, g), _)| {
                            (&**r, &**c, &**g).cmp(&(&**rule_name, &**cluster, &**group))
                        })
                        .ok()?;
                    Some(&tallies[at].1)
                });
            let windowed = match base {
                Some(base) => tally.since(base),
                None => tally.clone(),
            };
            let verdict = self
                .verdicts
                .entry((
                    rule_name.to_string(),
                    cluster.to_string(),
                    group.to_string(),
                ))
                .or_default();
            let Some(value) = windowed.measure(rule) else {
                continue;
            };
            let group_name = (!group.is_empty()).then(|| group.to_string());
            verdict.value = Some(value);
            if value > rule.above {
                let since = *verdict.holding_since.get_or_insert(now);
                if now - since >= i64::from(rule.for_seconds) && verdict.firing != Some(true) {
                    verdict.firing = Some(true);
                    changes.push(RuleChange {
                        rule: rule.name.clone(),
                        cluster: cluster.to_string(),
                        group: group_name,
                        firing: true,
                        value,
                        threshold: rule.above,
                        since,
                        summary: rule.summary(cluster, group, value, true),
                    });
                }
            } else {
                verdict.holding_since = None;
                if verdict.firing != Some(false) {
                    verdict.firing = Some(false);
                    changes.push(RuleChange {
                        rule: rule.name.clone(),
                        cluster: cluster.to_string(),
                        group: group_name,
                        firing: false,
                        value,
                        threshold: rule.above,
                        since: now,
                        summary: rule.summary(cluster, group, value, false),
                    });
                }
            }
        }
        // A cluster with no SLIs left was let go (removed, or handed to another replica):
        // its verdicts go with it.
        self.verdicts
            .retain(|(_, cluster, _), _| rows.iter().any(|r| &r.cluster == cluster));
        self.history.push_back((now, tallies));
        changes
    }

    /// Makes the next evaluation tell every verdict again, as a first verdict is told — for a
    /// replica that has just taken the Lease: what it told while following reached no plugin,
    /// and the leader it replaces may have died before delivering. A rule keeps how long its
    /// condition has held, so a standing firing is told at once, not a `for` later; the lanes'
    /// shared cursors drop what was delivered.
    pub fn tell_again(&mut self) {
        for verdict in self.verdicts.values_mut() {
            verdict.firing = None;
        }
    }

    /// A cluster is no longer here: its verdicts go (its new holder judges it).
    pub fn forget_cluster(&mut self, cluster: &str) {
        self.verdicts.retain(|(_, c, _), _| c != cluster);
    }

    /// How many evaluations are kept for the windows' bases.
    pub fn history_len(&self) -> usize {
        self.history.len()
    }

    /// Every rule's reading on every cluster it has judged.
    pub fn readings(&self) -> Vec<RuleReading> {
        self.verdicts
            .iter()
            .map(|((rule, cluster, group), v)| RuleReading {
                rule: rule.clone(),
                cluster: cluster.clone(),
                group: group.clone(),
                firing: v.firing == Some(true),
                value: v.value,
            })
            .collect()
    }
}

/// The namespace name SLIs use past a cluster's cap, for rules that want those jobs.
pub const OTHER_NAMESPACES: &str = OTHER;

#[cfg(test)]
mod tests;
