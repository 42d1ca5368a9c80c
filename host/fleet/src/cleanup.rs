//! Clean-up of finished jobs: which jobs are to be deleted, from when, and what still stops
//! each one. The deletions themselves are made by the daemon (it owns the clients); this is
//! the schedule they work from, with no tasks and no I/O.
//!
//! **Fed by the dispatcher.** Every version the watch observes passes [`Schedule::observe`]:
//! a job whose phase ends its run (succeeded, failed) and that a rule of `cleanup:` covers is
//! entered with the time its status gives for that end; a job seen in any other phase (running
//! again, being deleted, deleted) leaves the schedule. Nothing of it is stored: every start (and
//! every take-over of a cluster) lists every job again, so the schedule of a cluster is rebuilt
//! from the jobs themselves, and the condition — what the plugins still owe a job — from the
//! lanes' queues (fed from the inbox before any watch starts) and the stored dead letters. A
//! kill at any point therefore neither loses a deletion (the finished job is listed again) nor
//! repeats one (a deleted job is not listed again).
//!
//! **Keyed by uid.** An entry names the job's uid, and the deletion carries it as a
//! precondition: a job re-created under the same name is a new entry, never deleted by the old
//! one's schedule.

use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use wildmatch::WildMatch;

use jobrelay_contract::event::{JobEvent, JobKey};
use jobrelay_contract::uid::Uid;
use jobrelay_watch::kinds::JobKind;
use jobrelay_watch::tracker::Listed;

/// The `cleanup:` section of the main file, as written.
///
/// ```yaml
/// cleanup:
///   dry_run: false
///   per_cluster_per_second: 5
///   propagation: Background
///   rules:
///     - kinds: [volcano-job, pytorch-job]
///       namespaces: ["team-*"]
///       after_finished: 1h
///       once_delivered: [mysql-sync, log-archive]
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CleanupSpec {
    /// Log and count what would be deleted; delete nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// The most deletions a second on one cluster (evenly spaced, no burst).
    #[serde(default = "default_rate")]
    pub per_cluster_per_second: u32,
    /// What happens to the job's pods and other dependents.
    #[serde(default)]
    pub propagation: Propagation,
    /// Which jobs are deleted, and when; the first rule that covers a job applies.
    #[serde(default)]
    pub rules: Vec<RuleSpec>,
}

fn default_rate() -> u32 {
    5
}

impl Default for CleanupSpec {
    fn default() -> Self {
        CleanupSpec {
            dry_run: false,
            per_cluster_per_second: default_rate(),
            propagation: Propagation::default(),
            rules: Vec::new(),
        }
    }
}

/// The deletion's `propagationPolicy`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Propagation {
    /// The job goes at once; the garbage collector removes its pods after.
    #[default]
    Background,
    /// The job stays (being deleted) until its pods are gone.
    Foreground,
    /// The pods are left behind.
    Orphan,
}

impl Propagation {
    /// The policy as Kubernetes spells it (`Background`), for logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Propagation::Background => "Background",
            Propagation::Foreground => "Foreground",
            Propagation::Orphan => "Orphan",
        }
    }
}

/// One rule as written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleSpec {
    /// Kind names (as in `kinds:`); at least one.
    pub kinds: Vec<String>,
    /// Namespaces, `*` and `?` patterns; empty: every namespace.
    #[serde(default)]
    pub namespaces: Vec<String>,
    /// How long after the job finished it is deleted: `30m`, `2h`, `7days`, or seconds.
    pub after_finished: AfterFinished,
    /// The plugins that must have delivered the job's end first. Absent: every plugin whose
    /// lane wants the kind.
    #[serde(default)]
    pub once_delivered: Option<Vec<String>>,
}

/// A duration as written: seconds, or text such as `90s`, `30m`, `2h`, `7days`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum AfterFinished {
    /// A whole number: seconds.
    Seconds(u64),
    /// Text for `humantime` to read (`30m`, `2h`, `7days`).
    Text(String),
}

impl AfterFinished {
    /// The duration written; an error for text that is no duration.
    pub fn duration(&self) -> Result<Duration, DurationError> {
        match self {
            AfterFinished::Seconds(s) => Ok(Duration::from_secs(*s)),
            AfterFinished::Text(text) => humantime::parse_duration(text.trim()).map_err(|source| {
                DurationError::NotADuration {
                    text: text.clone(),
                    source,
                }
            }),
        }
    }
}

/// Why a duration as written ([`AfterFinished`]) is refused; the caller names the field.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DurationError {
    /// Text that `humantime` does not read as a duration.
    #[error("`{text}` is not a duration ({source}); write e.g. 30m, 2h, 7days")]
    NotADuration {
        /// The text as written.
        text: String,
        /// What `humantime` could not read.
        source: humantime::DurationError,
    },
}

/// Why the `cleanup:` section is refused; the message names the field.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CleanupError {
    /// `per_cluster_per_second` outside 1 to 1000.
    #[error("cleanup.per_cluster_per_second: must be between 1 and 1000")]
    Rate {
        /// The rate as written.
        given: u32,
    },
    /// A rule with an empty `kinds`, which would cover no job.
    #[error("cleanup.rules[{rule}].kinds: name at least one kind")]
    NoKinds {
        /// The rule's place in `rules`, from 0.
        rule: usize,
    },
    /// A rule names a kind that is not watched, so no job of it could ever be seen finished.
    #[error(
        "cleanup.rules[{rule}].kinds[{index}]: `{kind}` is not a watched kind (kinds: {})",
        .watched.join(", ")
    )]
    NotWatched {
        /// The rule's place in `rules`, from 0.
        rule: usize,
        /// The kind's place in the rule's `kinds`, from 0.
        index: usize,
        /// The kind as written.
        kind: String,
        /// The names of the watched kinds.
        watched: Vec<String>,
    },
    /// A blank namespace pattern, which covers nothing.
    #[error(
        "cleanup.rules[{rule}].namespaces[{index}]: an empty pattern covers nothing; leave the \
         list out to cover every namespace"
    )]
    EmptyNamespace {
        /// The rule's place in `rules`, from 0.
        rule: usize,
        /// The pattern's place in the rule's `namespaces`, from 0.
        index: usize,
    },
    /// A blank name in `once_delivered`, which no plugin could confirm.
    #[error("cleanup.rules[{rule}].once_delivered[{index}]: empty plugin name")]
    EmptyPluginName {
        /// The rule's place in `rules`, from 0.
        rule: usize,
        /// The name's place in `once_delivered`, from 0.
        index: usize,
    },
    /// An `after_finished` that is no duration.
    #[error("cleanup.rules[{rule}].after_finished: {why}")]
    AfterFinished {
        /// The rule's place in `rules`, from 0.
        rule: usize,
        /// What is wrong with it.
        #[source]
        why: DurationError,
    },
}

/// The `cleanup:` section after validation.
#[derive(Debug, Clone, PartialEq)]
pub struct CleanupSettings {
    /// Count and log what would be deleted; delete nothing.
    pub dry_run: bool,
    /// The most deletions a second on one cluster, 1 to 1000.
    pub per_cluster_per_second: NonZeroU32,
    /// What happens to a deleted job's pods and other dependents.
    pub propagation: Propagation,
    /// The rules in order; the first that covers a job applies.
    pub rules: Vec<CleanupRule>,
}

impl Default for CleanupSettings {
    fn default() -> Self {
        CleanupSettings {
            dry_run: false,
            per_cluster_per_second: NonZeroU32::MIN.saturating_add(default_rate() - 1),
            propagation: Propagation::default(),
            rules: Vec::new(),
        }
    }
}

/// One rule after validation.
#[derive(Debug, Clone)]
pub struct CleanupRule {
    /// The configured kinds covered, each a watched one.
    pub kinds: Vec<String>,
    /// As written, for the status and errors.
    pub namespaces: Vec<String>,
    patterns: Vec<WildMatch>,
    /// How long after its end a job is due.
    pub after_finished: Duration,
    /// The plugins that must have delivered the job's end first; `None`: every plugin whose
    /// lane wants the kind.
    pub once_delivered: Option<Vec<String>>,
}

impl PartialEq for CleanupRule {
    fn eq(&self, other: &CleanupRule) -> bool {
        self.kinds == other.kinds
            && self.namespaces == other.namespaces
            && self.after_finished == other.after_finished
            && self.once_delivered == other.once_delivered
    }
}

impl CleanupRule {
    fn covers(&self, kind: &str, namespace: &str) -> bool {
        self.kinds.iter().any(|k| k == kind)
            && (self.patterns.is_empty() || self.patterns.iter().any(|p| p.matches(namespace)))
    }
}

impl CleanupSpec {
    /// Checks the section against the watched kinds' names; errors name the field.
    pub fn validate(self, kinds: &[&str]) -> Result<CleanupSettings, CleanupError> {
        let per_cluster_per_second = NonZeroU32::new(self.per_cluster_per_second)
            .filter(|n| n.get() <= 1000)
            .ok_or(CleanupError::Rate {
                given: self.per_cluster_per_second,
            })?;
        let mut rules = Vec::with_capacity(self.rules.len());
        for (i, rule) in self.rules.into_iter().enumerate() {
            if rule.kinds.is_empty() {
                return Err(CleanupError::NoKinds { rule: i });
            }
            for (k, kind) in rule.kinds.iter().enumerate() {
                if !kinds.contains(&kind.as_str()) {
                    return Err(CleanupError::NotWatched {
                        rule: i,
                        index: k,
                        kind: kind.clone(),
                        watched: kinds.iter().map(|k| k.to_string()).collect(),
                    });
                }
            }
            if let Some(n) = rule.namespaces.iter().position(|n| n.trim().is_empty()) {
                return Err(CleanupError::EmptyNamespace { rule: i, index: n });
            }
            if let Some(names) = &rule.once_delivered
                && let Some(p) = names.iter().position(|n| n.trim().is_empty())
            {
                return Err(CleanupError::EmptyPluginName { rule: i, index: p });
            }
            let after_finished = rule
                .after_finished
                .duration()
                .map_err(|why| CleanupError::AfterFinished { rule: i, why })?;
            rules.push(CleanupRule {
                patterns: rule.namespaces.iter().map(|n| WildMatch::new(n)).collect(),
                kinds: rule.kinds,
                namespaces: rule.namespaces,
                after_finished,
                once_delivered: rule.once_delivered,
            });
        }
        Ok(CleanupSettings {
            dry_run: self.dry_run,
            per_cluster_per_second,
            propagation: self.propagation,
            rules,
        })
    }
}

impl CleanupSettings {
    /// The first rule covering jobs of `kind` (its configured name) in `namespace`.
    pub fn rule_for(&self, kind: &str, namespace: &str) -> Option<&CleanupRule> {
        self.rules.iter().find(|r| r.covers(kind, namespace))
    }

    /// Whether any job is cleaned up at all.
    pub fn is_on(&self) -> bool {
        !self.rules.is_empty()
    }
}

/// A finished job, as the deleter needs it.
#[derive(Debug, Clone)]
pub struct FinishedJob {
    /// The job's cluster.
    pub cluster: String,
    /// The configured kind, for the resource the DELETE goes to.
    pub kind: Arc<JobKind>,
    /// The job's namespace.
    pub namespace: String,
    /// The job's name.
    pub name: String,
    /// The job's uid, the DELETE's precondition: a job re-created under the name is spared.
    pub uid: String,
    /// When the job finished: the time its status gives for its end, or when jobrelay saw it
    /// finished if the status gives none (after a restart that is later, never sooner).
    pub finished_at: DateTime<Utc>,
}

impl FinishedJob {
    /// The job's key in the schedule and the lanes.
    pub fn key(&self) -> JobKey {
        JobKey {
            cluster: self.cluster.clone(),
            uid: self.uid.clone(),
        }
    }
}

/// Why a due job is not deleted yet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "reason", content = "detail", rename_all = "snake_case")]
pub enum Held {
    /// The plugin has events of the job queued or in flight.
    PendingDelivery(String),
    /// The plugin dead-lettered an event of the job: replayed and delivered, or dropped by
    /// the operator (`jobrelay dead-letters drop`), it no longer holds the job.
    DeadLettered(String),
    /// `once_delivered` names a plugin that is not loaded: nothing can confirm its delivery.
    PluginNotLoaded(String),
    /// The job's cluster has no client now.
    NotConnected,
    /// The last deletion attempt failed; it is tried again.
    Failing(String),
}

impl Held {
    /// The label of the reason, for metrics.
    pub fn state(&self) -> &'static str {
        match self {
            Held::PendingDelivery(_) => "pending_delivery",
            Held::DeadLettered(_) => "dead_lettered",
            Held::PluginNotLoaded(_) => "plugin_not_loaded",
            Held::NotConnected => "not_connected",
            Held::Failing(_) => "failing",
        }
    }
}

/// Where an entry is.
#[derive(Debug, Clone)]
enum Stage {
    /// Not due, or due and not looked at since `recheck`.
    Waiting { recheck: Instant },
    /// Handed out by [`Schedule::take_due`]; its check or deletion is under way.
    Taken,
    /// Due and held back, looked at again from `recheck`.
    Held { why: Held, recheck: Instant },
    /// Counted as a dry run's deletion; taken again only once `dry_run` is off.
    WouldDelete,
}

#[derive(Debug)]
struct Entry {
    job: FinishedJob,
    stage: Stage,
    /// Failed deletion attempts, for the backoff.
    failures: u32,
}

/// The schedule: every finished job a rule covers, on the clusters this replica delivers.
pub struct Schedule {
    settings: ArcSwap<CleanupSettings>,
    entries: Mutex<HashMap<JobKey, Entry>>,
}

/// What [`Schedule::snapshot`] reports.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct ScheduleView {
    /// Entries by cluster and stage: `scheduled` (not due yet), `due` (queued for deletion),
    /// `would_delete`
    /// (dry run), or a [`Held`] reason's label.
    pub jobs: BTreeMap<String, BTreeMap<&'static str, u64>>,
    /// Up to [`VIEW_HELD`] held jobs, oldest finished first.
    pub held: Vec<HeldView>,
}

/// One held job, for the status page.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct HeldView {
    /// The job's cluster.
    pub cluster: String,
    /// The configured kind's name.
    pub kind: String,
    /// The job's namespace.
    pub namespace: String,
    /// The job's name.
    pub name: String,
    /// The job's uid.
    pub uid: String,
    /// RFC 3339: when the job finished, as the schedule counts it.
    pub finished_at: String,
    /// What holds it.
    #[serde(flatten)]
    pub held: Held,
}

/// How many held jobs the status lists by name.
pub const VIEW_HELD: usize = 50;

impl Schedule {
    /// An empty schedule under `settings`; the dispatcher fills it.
    pub fn new(settings: CleanupSettings) -> Arc<Schedule> {
        Arc::new(Schedule {
            settings: ArcSwap::from_pointee(settings),
            entries: Mutex::new(HashMap::new()),
        })
    }

    /// The settings in force.
    pub fn settings(&self) -> Arc<CleanupSettings> {
        self.settings.load_full()
    }

    /// New settings from an edited main file: they apply to the entries there are. Every
    /// waiting job is looked at again at the next [`Schedule::take_due`], so a shortened
    /// `after_finished` brings it forward, and a job no rule covers any more leaves.
    pub fn set_settings(&self, settings: CleanupSettings) {
        let now = Instant::now();
        let mut entries = self.lock();
        entries.retain(|_, e| {
            settings
                .rule_for(&e.job.kind.name, &e.job.namespace)
                .is_some()
        });
        for entry in entries.values_mut() {
            if let Stage::Waiting { recheck } = &mut entry.stage {
                *recheck = now;
            }
        }
        self.settings.store(Arc::new(settings));
    }

    /// Whether going from `self` to `next` can cover jobs no rule covered before — a job
    /// finished earlier is then only scheduled once its cluster is listed again.
    pub fn rules_differ(&self, next: &CleanupSettings) -> bool {
        self.settings.load().rules != next.rules
    }

    /// One observed version of a job of `kind`: enters a finished job a rule covers, removes a
    /// job in any other phase.
    pub fn observe(&self, event: &JobEvent, kind: &Arc<JobKind>) {
        let settings = self.settings.load();
        if !settings.is_on() {
            return;
        }
        let key = event.job_key();
        let covered = settings.rule_for(&kind.name, &event.namespace).is_some();
        let mut entries = self.lock();
        if !covered || !event.phase.is_terminal() {
            entries.remove(&key);
            return;
        }
        let end_time = DateTime::parse_from_rfc3339(&event.transition_time)
            .map(|t| t.with_timezone(&Utc))
            .ok();
        if let Some(entry) = entries.get_mut(&key) {
            // A later version of the end can name another deciding condition — a batch Job's
            // `Complete` after the `SuccessCriteriaMet` a re-list found — and the grace counts
            // from the time the status gives now, as it would have live. A version that gives
            // no time keeps the clock it had.
            if let Some(end) = end_time
                && end != entry.job.finished_at
            {
                entry.job.finished_at = end;
                if let Stage::Waiting { recheck } = &mut entry.stage {
                    *recheck = Instant::now();
                }
            }
            return;
        }
        let finished_at = end_time.unwrap_or_else(Utc::now);
        entries.insert(
            key,
            Entry {
                job: FinishedJob {
                    cluster: event.cluster.clone(),
                    kind: kind.clone(),
                    namespace: event.namespace.clone(),
                    name: event.name.clone(),
                    uid: event.uid.clone(),
                    finished_at,
                },
                stage: Stage::Waiting {
                    recheck: Instant::now(),
                },
                failures: 0,
            },
        );
    }

    /// A stream finished a (re-)list: jobs of its cluster, kind and namespace that were not
    /// listed are gone (deleted while the watch was away) and leave.
    pub fn listed(&self, listed: &Listed) {
        self.lock().retain(|key, e| {
            key.cluster != *listed.cluster
                || e.job.kind.name != listed.kind.name
                || listed
                    .namespace
                    .as_ref()
                    .is_some_and(|ns| *ns != e.job.namespace)
                || listed.uids.contains(&Uid::new(&key.uid))
        });
    }

    /// The jobs due now and not looked at since their last recheck time, with the rule that
    /// covers each, the longest finished first. Each is handed out once (taken) until
    /// [`Schedule::hold`], [`Schedule::failed`], [`Schedule::would_delete`] or
    /// [`Schedule::done`] says what became of it, or an observation takes it out
    /// ([`Schedule::still_taken`] tells). Jobs no rule covers any more were taken out by the
    /// edit ([`Schedule::set_settings`]).
    pub fn take_due(
        &self,
        now: DateTime<Utc>,
        instant: Instant,
    ) -> Vec<(FinishedJob, CleanupRule)> {
        let settings = self.settings.load_full();
        let mut entries = self.lock();
        let mut due = Vec::new();
        for entry in entries.values_mut() {
            let ready = match &entry.stage {
                Stage::Waiting { recheck } | Stage::Held { recheck, .. } => *recheck <= instant,
                Stage::WouldDelete => !settings.dry_run,
                Stage::Taken => false,
            };
            if !ready {
                continue;
            }
            let Some(rule) = settings.rule_for(&entry.job.kind.name, &entry.job.namespace) else {
                continue;
            };
            let due_at = entry.job.finished_at
                + chrono::Duration::from_std(rule.after_finished).unwrap_or(chrono::Duration::MAX);
            if due_at > now {
                // Looked at again when due (an edit of the settings resets every wait).
                let wait = (due_at - now).to_std().unwrap_or(Duration::ZERO);
                entry.stage = Stage::Waiting {
                    recheck: instant + wait,
                };
                continue;
            }
            entry.stage = Stage::Taken;
            due.push((entry.job.clone(), rule.clone()));
        }
        // The longest finished first, then by namespace and name: the deleters take them in
        // this order, and a map's order would change from run to run.
        due.sort_by(|(a, _), (b, _)| {
            (a.finished_at, &a.namespace, &a.name).cmp(&(b.finished_at, &b.namespace, &b.name))
        });
        due
    }

    /// A taken job is held back for `why`, and looked at again after `recheck`.
    pub fn hold(&self, key: &JobKey, why: Held, recheck: Duration) {
        if let Some(entry) = self.lock().get_mut(key) {
            entry.stage = Stage::Held {
                why,
                recheck: Instant::now() + recheck,
            };
        }
    }

    /// A deletion of a taken job failed with `error`: held as failing, looked at again after
    /// `wait(n)`, `n` being how many of its deletions failed so far (this one included; other
    /// holds do not count). Returns the wait chosen.
    pub fn failed(&self, key: &JobKey, error: String, wait: impl Fn(u32) -> Duration) -> Duration {
        let mut entries = self.lock();
        let Some(entry) = entries.get_mut(key) else {
            return Duration::ZERO;
        };
        entry.failures = entry.failures.saturating_add(1);
        let after = wait(entry.failures);
        entry.stage = Stage::Held {
            why: Held::Failing(error),
            recheck: Instant::now() + after,
        };
        after
    }

    /// Whether the job is still taken for deletion: no observation took it out since (it runs
    /// again, is being deleted, or is gone) and no edit dropped its rule. Asked right before
    /// the DELETE, since a taken job may wait its turn behind a long backlog.
    pub fn still_taken(&self, key: &JobKey) -> bool {
        self.lock()
            .get(key)
            .is_some_and(|e| matches!(e.stage, Stage::Taken))
    }

    /// A dry run counted the job: it is not counted again while `dry_run` stays on.
    pub fn would_delete(&self, key: &JobKey) {
        if let Some(entry) = self.lock().get_mut(key) {
            entry.stage = Stage::WouldDelete;
        }
    }

    /// The job is deleted, gone, or replaced by another of its name: it leaves the schedule.
    pub fn done(&self, key: &JobKey) {
        self.lock().remove(key);
    }

    /// Another replica took the cluster over (or it was removed): its jobs leave; the replica
    /// that lists it next schedules them again.
    pub fn forget_cluster(&self, cluster: &str) {
        self.lock().retain(|key, _| key.cluster != cluster);
    }

    /// Jobs in the schedule, in every stage.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no job is in the schedule.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Entries by cluster and stage, and the held jobs.
    pub fn snapshot(&self) -> ScheduleView {
        let entries = self.lock();
        let mut view = ScheduleView::default();
        let mut held: Vec<&Entry> = Vec::new();
        for entry in entries.values() {
            let stage = match &entry.stage {
                Stage::Waiting { .. } => "scheduled",
                Stage::Taken => "due",
                Stage::WouldDelete => "would_delete",
                Stage::Held { why, .. } => {
                    held.push(entry);
                    why.state()
                }
            };
            *view
                .jobs
                .entry(entry.job.cluster.clone())
                .or_default()
                .entry(stage)
                .or_default() += 1;
        }
        held.sort_by_key(|e| e.job.finished_at);
        view.held = held
            .into_iter()
            .take(VIEW_HELD)
            .filter_map(|e| match &e.stage {
                Stage::Held { why, .. } => Some(HeldView {
                    cluster: e.job.cluster.clone(),
                    kind: e.job.kind.name.clone(),
                    namespace: e.job.namespace.clone(),
                    name: e.job.name.clone(),
                    uid: e.job.uid.clone(),
                    finished_at: e
                        .job
                        .finished_at
                        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                    held: why.clone(),
                }),
                _ => None,
            })
            .collect();
        view
    }

    fn lock(&self) -> parking_lot::MutexGuard<'_, HashMap<JobKey, Entry>> {
        self.entries.lock()
    }
}

#[cfg(test)]
mod tests;
