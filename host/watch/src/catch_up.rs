//! Catch-up after a watch gap: rebuilding the transitions a job went through while jobrelay was
//! not watching, from the timestamps its own status keeps.
//!
//! After a `410 Gone` re-list, an outage or a restart, jobrelay sees only a job's *current*
//! object. If the status records earlier phases with times, [`missed_transitions`] lists the
//! ones that happened after the last delivered state and before the current one, and
//! [`synthetic_events`] turns them into events flagged `synthetic`, to be delivered before the
//! real event. Both are pure: no I/O, no clock. A job with nothing delivered yet is caught up
//! from the start of its recorded history by [`recorded_transitions`] (module `first_sight`).
//! The live path reads the same history for when the current stay began ([`recorded`]), which
//! its transition key is made of (`crate::transition_key`), so a transition seen live and one
//! rebuilt later get the same key.
//!
//! # How the history is read
//!
//! Each kind yields *recorded entries* `(phase, time)`; they are sorted by time (ties broken
//! per kind, see below), entries after the current phase's own time are dropped (they cannot
//! precede it; not done for `terminating`, whose time is the API server's deletion timestamp
//! and may be behind the controller's clock), and consecutive entries with the same
//! normalized phase are folded into the first one (when the phase was entered). From that
//! history the catch-up keeps what lies strictly after `last_time`, minus a leading entry
//! equal to `last_phase` (already delivered) and a trailing entry equal to the current phase
//! (that one is the real event).
//!
//! Timestamps in Kubernetes statuses have one-second resolution, so several transitions can
//! share a time. Entries before `last_time` were delivered. Entries at exactly `last_time` were
//! too up to the entry of `last_phase` among them (the order says what came later); when the
//! history holds `last_phase` more than once in that second, up to the first of them; when it
//! holds none (`last_time` is jobrelay's own clock, for a status without a transition time —
//! except in the stay a job was created in, which began at its `creationTimestamp` — or a
//! time recorded elsewhere), none of them counts as delivered. The cursor is placed among
//! the entries as recorded, before folding: a status rewritten in the same phase moves its
//! state time on (the time a cursor keeps) and records an entry that folds into the stay, and
//! that entry, not a later stay of the phase in the same second, is the cursor's. In every
//! doubtful case a transition is delivered again — under the transition key it had, which
//! plugins dedupe on — rather than lost. Clock skew between jobrelay and the controllers
//! matters only if `last_time` was jobrelay's own clock: a transition recorded a second or
//! more "before" it is lost.
//!
//! # What each kind can and cannot tell
//!
//! **Volcano** (`batch.volcano.sh/v1alpha1 Job`): `status.conditions[]` holds
//! `{status: <JobPhase>, lastTransitionTime}`. The field is declared with
//! `patchMergeKey=status`, which *suggests* one entry per phase, but the job controller writes
//! the whole status with `UpdateStatus` (no strategic merge) and *appends* an entry on every
//! phase change (`syncJob`/`killJob`, and `initJobStatus` for the first `Pending`); the test
//! kit's driver does the same. So a phase entered twice appears twice, in order, and
//! Running → Restarting → Running → Failed is fully recoverable. Entries are mapped with the
//! normalizer's own table (`normalize::volcano_phase`), so Completing/Terminating/Aborting
//! fold into the running entry before them exactly as a live watch would see them. Ties are
//! broken by array order (append order is chronological). Limits: newer Volcano releases drop
//! consecutive duplicates (harmless, we fold them anyway) and keep only the newest 32 entries
//! (a gap longer than 32 phase changes loses its oldest part); entries carry no reason or
//! message. Should a writer ever merge entries by phase (one per phase, newest time kept), an
//! earlier visit of a phase loses its time: Pending → Running → Restarting → Running → Failed
//! then reads as Pending → Restarting → Running → Failed — the first Running is missing,
//! nothing is invented.
//!
//! **Kubeflow** (PyTorchJob, MPIJob): conditions Created/Running/Restarting/Suspended/
//! Succeeded/Failed, one entry per type. Every *True* condition is an entry at its
//! `lastTransitionTime`, with its reason and message. Ties are broken by lifecycle order
//! (Created, Running, Restarting, Suspended, Succeeded, Failed). What is lost:
//! - Running and Restarting *replace* each other, so after Running → Restarting → Running the
//!   Restarting entry is gone and Running carries the re-entry time: a restart that ended
//!   before the gap closed cannot be seen, and Running → Restarting → Running → Failed reads
//!   as Running → Failed (the earlier Running is folded with the delivered one).
//! - On Succeeded/Failed the operators flip Running to *False* without touching its
//!   `lastTransitionTime` (training-operator and mpi-operator `filterOutCondition`; the test
//!   kit too), so a False Running condition still says when the job last started running. It
//!   is taken as a Running entry at that time; other operator versions stamp the flip time
//!   instead, which then is only an upper bound, still ordered before the terminal condition
//!   of the same second. Its reason/message describe the flip, not the start, so they are
//!   left out. A False Running condition whose reason marks a suspension (`…Suspended`) is
//!   *not* taken as proof of running: suspending writes it whether or not the job ever ran.
//! - False Suspended (a resume) and other False conditions say when something ended, not a
//!   phase that began; they are ignored.
//!
//! **batch/v1 Job**: True conditions at their `lastTransitionTime`: Suspended → suspended,
//! SuccessCriteriaMet and Complete → succeeded, FailureTarget and Failed → failed (the same
//! mapping as the normalizer; interim and final fold into one transition). Running has no
//! condition: it is taken from `status.startTime` when pod counts (`active`, `ready`,
//! `succeeded`, `failed`, `terminating`) show that pods existed; raw phase `Active`, as the
//! normalizer names it. Limits: `startTime` is when the controller started the pods (not
//! when they became ready), it is cleared on suspension and reset on resume, so only the
//! latest start is known; pending has no time (nothing is rebuilt for it); the normalizer
//! never reports restarting for batch, and neither does this.
//!
//! **Generic `conditions` rules**: True conditions of the listed types at their
//! `lastTransitionTime`, mapped by the rule list; ties are broken by the list read backwards
//! (the first rule is the most final). One entry per type, so a type entered twice keeps
//! only its latest time; False conditions are ignored.
//!
//! **Generic `field` rules**: a single phase string has no history: nothing is rebuilt.
//!
//! Malformed input (conditions that are not an array, entries that are not objects, missing
//! or unparsable times) yields fewer entries, never a panic. `metadata.deletionTimestamp`
//! makes the current phase `terminating` (as the normalizer says), so a job that finished and
//! was then deleted during the gap gets its terminal phase as a missed transition.

use chrono::{DateTime, FixedOffset};
use serde_json::Value;

use super::json_pointer::at;
use super::kinds::NormalizerSpec;
use super::normalize::{Normalized, normalize, volcano_phase};
use jobrelay_contract::event::{JobEvent, Phase};
use jobrelay_contract::transition_key::TransitionKey;

mod first_sight;
mod gap;
pub use first_sight::{created_after, first_sight_events, recorded_transitions};
pub use gap::{LastAccepted, gap_events};

/// One transition the status recorded but jobrelay did not see.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissedTransition {
    /// The phase entered.
    pub phase: Phase,
    /// The kind's own phase or condition type.
    pub raw_phase: String,
    /// The recorded entry's reason, where the history keeps one (a condition's `reason`).
    pub reason: Option<String>,
    /// The recorded entry's message, where the history keeps one.
    pub message: Option<String>,
    /// When the phase was entered, RFC 3339, exactly as the status wrote it.
    pub at: String,
    /// Position of this transition in the object's whole recorded (folded) history, from 0.
    /// It does not depend on `last_phase`/`last_time`, so the synthetic ids built from it stay
    /// the same when a catch-up is cut short and redone from a later cursor.
    pub ordinal: usize,
    /// 1 + the earlier entries of this phase at this same `at` in the history (see
    /// [`Recorded::Entered`]).
    pub n: u32,
    /// The entry of the stay the job was created in (see [`Recorded::Created`]).
    pub created: bool,
}

/// What a status records of when one stay of a job began: what its transition key is made
/// of (`crate::transition_key`). The live path and the catch-up read it with the same code
/// from the same history, so a transition observed live and rebuilt later get the same.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recorded {
    /// The job has not left the stay it was created in (built-in kinds only, see
    /// `first_stay`).
    Created,
    /// The status records when the phase was entered.
    Entered {
        /// The entry time, its text as the status writes it.
        at: String,
        /// Numbers the entries of this phase at that same text in the history, from 1: a
        /// Volcano job that runs, restarts and runs again within one second has `running` at
        /// `at` twice.
        n: u32,
    },
    /// Nothing in the status tells when this stay began.
    Unrecorded,
}

/// Transitions recorded in `object`'s status that happened after the last delivered state
/// (`last_phase`, entered at `last_time`, RFC 3339) and before the object's current phase,
/// oldest first.
///
/// Never starts with `last_phase`, never contains the current phase as its last item (that is
/// the real event), has no two consecutive items of the same phase, and is empty when the
/// status records no usable times, when `last_time` is `None` (nothing was delivered for this
/// job: first sight is not a gap) or does not parse.
pub fn missed_transitions(
    spec: &NormalizerSpec,
    object: &Value,
    last_phase: Phase,
    last_time: Option<&str>,
) -> Vec<MissedTransition> {
    let Some(last) = last_time.and_then(parse_time) else {
        return Vec::new();
    };
    let current = normalize(spec, object);
    let entries = entries(spec, object, cut_at(&current));

    // Entries before `last_time` were delivered. Of those sharing its second, the ones up to
    // the last delivered phase's entry were too; when that phase was entered more than once
    // in the second, up to the first of them. When it is not among them at all (the cursor's
    // time is jobrelay's clock, or a record of its own), they may all have come after it.
    // Either way a transition the cursor may not cover is delivered again — under the key it
    // had, which plugins dedupe on — rather than lost.
    //
    // This is read from the entries as recorded, before folding: the cursor's time may be
    // that of an entry folded into its stay (a status rewritten in the same phase, whose
    // state time moved on), and a later stay of the same phase within that second must not
    // be taken for it — which would count the stays between as delivered.
    let before = entries.iter().take_while(|s| s.at < last).count();
    let tied = entries[before..]
        .iter()
        .take_while(|s| s.at == last)
        .count();
    let start = entries[before..before + tied]
        .iter()
        .position(|s| s.phase == last_phase)
        .map_or(before, |i| before + i + 1);
    let history = fold(entries);
    // A stay whose first entry is at or after `start`; the stay `start` falls inside (the
    // cursor's own, continued) is not one.
    let mut missed = &history[history.partition_point(|s| s.entry < start)..];
    if let Some((first, rest)) = missed.split_first()
        && first.phase == last_phase
    {
        missed = rest;
    }
    before_current(spec, missed, current.phase)
}

/// Whether a version in `phase`, entered at `time` (RFC 3339, as its event carries them), is
/// still in the stay last delivered (`last`: its phase and time) — so nothing can lie between
/// — as far as that can be told without reading its status ([`missed_transitions`] reads it).
///
/// Another phase is another stay. The same phase entered at another time left it and came
/// back — which only a kind with a recorded history can tell (a field rule has none: its
/// same phase is its same stay). The same time is the same stay, except in a status that
/// records every entry (Volcano): there the state time is that of the last rewrite, a job may
/// leave its phase and come back within that second, and its entries tell (a job is deleted
/// once, though: `terminating` at the same time is the same).
pub fn stay_unchanged(
    spec: &NormalizerSpec,
    (last_phase, last_time): (Phase, &str),
    (phase, time): (Phase, &str),
) -> bool {
    if last_phase != phase {
        return false;
    }
    match spec {
        NormalizerSpec::Field(_) => true,
        NormalizerSpec::Volcano => phase == Phase::Terminating && last_time == time,
        NormalizerSpec::Kubeflow
        | NormalizerSpec::Batch
        | NormalizerSpec::Conditions(_)
        | NormalizerSpec::Rules(_) => last_time == time,
    }
}

/// What `object`'s status records of the stay its current version is in.
///
/// The stay the job was created in, for a built-in kind whose status shows it never left it
/// (`first_stay`); else the last entry of its recorded history when that entry is of the
/// current phase (exactly what a later catch-up reads for this transition, so a live event
/// and its reconstruction get the same key) — unless that entry is the creation's own, which
/// then tells of an earlier stay; else the normalizer's own recorded time (the deletion
/// timestamp for `terminating`, a kind's single transition time).
pub fn recorded(spec: &NormalizerSpec, object: &Value, current: &Normalized) -> Recorded {
    if current.phase == Phase::Pending && knows_first_stay(spec) && first_stay(spec, object) {
        return Recorded::Created;
    }
    let mut history = history(spec, object, cut_at(current));
    match history.pop() {
        Some(last) if last.phase == current.phase => {
            if last.is_creation(spec) {
                Recorded::Unrecorded
            } else {
                Recorded::Entered {
                    at: last.at_text,
                    n: last.occurrence,
                }
            }
        }
        _ => current
            .transition_time
            .clone()
            .map_or(Recorded::Unrecorded, |at| Recorded::Entered { at, n: 1 }),
    }
}

/// Whether a job of a built-in kind, pending now, has never left the stay it was created in,
/// as far as its status tells (the rules per kind are in the module docs). Generic kinds
/// have no such rule ([`knows_first_stay`]): a status of their own may record a return to a
/// pending condition in a way no rule here could tell from the first.
fn first_stay(spec: &NormalizerSpec, object: &Value) -> bool {
    let status = object.get("status");
    let count = |key: &str| {
        status
            .and_then(|s| s.get(key))
            .and_then(Value::as_i64)
            .unwrap_or(0)
    };
    match spec {
        NormalizerSpec::Volcano => {
            count("retryCount") == 0
                && conditions(object).all(|c| {
                    text(c, "status")
                        .is_none_or(|s| s.is_empty() || volcano_phase(s) == Phase::Pending)
                })
        }
        NormalizerSpec::Kubeflow => conditions(object).all(|c| text(c, "type") == Some("Created")),
        NormalizerSpec::Batch => {
            conditions(object).next().is_none() && count("succeeded") == 0 && count("failed") == 0
        }
        NormalizerSpec::Conditions(_) | NormalizerSpec::Field(_) | NormalizerSpec::Rules(_) => {
            false
        }
    }
}

/// Whether the kind has a rule for the stay its jobs are created in ([`first_stay`]): the
/// built-in kinds, whose controllers jobrelay knows.
fn knows_first_stay(spec: &NormalizerSpec) -> bool {
    matches!(
        spec,
        NormalizerSpec::Volcano | NormalizerSpec::Kubeflow | NormalizerSpec::Batch
    )
}

/// The history's entries as missed transitions, without a trailing entry of the current phase
/// (that one is the real event).
fn before_current(
    spec: &NormalizerSpec,
    history: &[Step],
    current: Phase,
) -> Vec<MissedTransition> {
    let mut entries = history;
    if let Some((tail, rest)) = entries.split_last()
        && tail.phase == current
    {
        entries = rest;
    }
    entries
        .iter()
        .map(|s| MissedTransition {
            phase: s.phase,
            raw_phase: s.raw.clone(),
            reason: s.reason.clone(),
            message: s.message.clone(),
            at: s.at_text.clone(),
            ordinal: s.ordinal,
            n: s.occurrence,
            created: s.is_creation(spec),
        })
        .collect()
}

/// Synthetic events for `missed`, each a copy of `current` (the real event about to be
/// delivered: same job fields and object) with `synthetic: true` and the transition's phase,
/// raw phase, reason, message and time.
///
/// `previous_phase` is chained: the first one's is `last_phase`, each next one's the phase
/// before it. The caller sets the real event's `previous_phase` to the last synthetic phase.
/// `resource_version` is `<current rv>~<phase>~<ordinal>` (e.g. `1234~running~1`) and `id` is
/// `cluster/uid/<that resource_version>`: the same status gives the same ids, so a
/// re-delivery after a restart can be recognised by plugins.
pub fn synthetic_events(
    current: &JobEvent,
    last_phase: Phase,
    missed: &[MissedTransition],
) -> Vec<JobEvent> {
    let mut previous = last_phase;
    missed
        .iter()
        .map(|m| {
            let rv = format!("{}~{}~{}", current.resource_version, m.phase, m.ordinal);
            let event = JobEvent {
                id: JobEvent::make_id(&current.cluster, &current.uid, &rv),
                transition_key: m.key().make(&current.cluster, &current.uid, m.phase),
                resource_version: rv,
                phase: m.phase,
                raw_phase: m.raw_phase.clone(),
                reason: m.reason.clone(),
                message: m.message.clone(),
                previous_phase: Some(previous),
                transition_time: m.at.clone(),
                synthetic: true,
                ..current.clone()
            };
            previous = m.phase;
            event
        })
        .collect()
}

/// Where the history is cut: entries recorded after the current phase was entered cannot
/// precede it. Not for `terminating`: its time is the deletion timestamp, written by the API
/// server's clock, while the status entries come from the controller's; a job that finished
/// a moment before it was deleted may carry a finish time "after" the deletion when the two
/// clocks disagree, and its outcome must not be cut off.
fn cut_at(current: &Normalized) -> Option<DateTime<FixedOffset>> {
    if current.phase == Phase::Terminating {
        return None;
    }
    current.transition_time.as_deref().and_then(parse_time)
}

/// One point of a job's recorded history.
#[derive(Debug)]
struct Step {
    phase: Phase,
    raw: String,
    reason: Option<String>,
    message: Option<String>,
    at: DateTime<FixedOffset>,
    at_text: String,
    /// Breaks ties between equal times: lower sorts first.
    rank: usize,
    ordinal: usize,
    /// 1 + the earlier entries of the same phase at the same time text.
    occurrence: u32,
    /// Folded: the index of its first entry among the sorted entries ([`entries`]).
    entry: usize,
}

impl Step {
    /// The entry of the stay the job was created in: the first of the history, pending, of a
    /// kind with a first-stay rule ([`first_stay`]).
    fn is_creation(&self, spec: &NormalizerSpec) -> bool {
        self.ordinal == 0 && self.phase == Phase::Pending && knows_first_stay(spec)
    }
}

impl MissedTransition {
    /// The transition key's parts for this transition.
    pub fn key(&self) -> TransitionKey<'_> {
        if self.created {
            TransitionKey::Created
        } else {
            TransitionKey::Entered {
                at: &self.at,
                n: self.n,
            }
        }
    }
}

/// The object's recorded history: sorted, cut at the current phase's time, folded, numbered.
fn history(
    spec: &NormalizerSpec,
    object: &Value,
    current_at: Option<DateTime<FixedOffset>>,
) -> Vec<Step> {
    fold(entries(spec, object, current_at))
}

/// The object's recorded entries, sorted and cut at the current phase's time, not folded.
fn entries(
    spec: &NormalizerSpec,
    object: &Value,
    current_at: Option<DateTime<FixedOffset>>,
) -> Vec<Step> {
    let mut entries = match spec {
        NormalizerSpec::Volcano => volcano(object),
        NormalizerSpec::Kubeflow => kubeflow(object),
        NormalizerSpec::Batch => batch(object),
        NormalizerSpec::Conditions(rules) => {
            let n = rules.len();
            let table: Vec<(&str, Phase, usize)> = rules
                .iter()
                .enumerate()
                .map(|(i, r)| (r.type_.as_str(), r.phase, n - 1 - i))
                .collect();
            true_conditions(object, &table)
        }
        NormalizerSpec::Rules(rules) => rules
            .dated_entries(object)
            .into_iter()
            .filter_map(|e| {
                Some(Step {
                    phase: e.phase,
                    raw: e.raw,
                    reason: e.reason,
                    message: e.message,
                    at: parse_time(&e.at)?,
                    at_text: e.at,
                    rank: e.rank,
                    ordinal: 0,
                    occurrence: 1,
                    entry: 0,
                })
            })
            .collect(),
        NormalizerSpec::Field(_) => Vec::new(),
    };
    // Stable: equal (time, rank) keep the status's own order.
    entries.sort_by(|a, b| a.at.cmp(&b.at).then(a.rank.cmp(&b.rank)));
    if matches!(
        spec,
        NormalizerSpec::Conditions(_) | NormalizerSpec::Rules(_)
    ) {
        one_per_second(&mut entries);
    }
    if let Some(limit) = current_at {
        entries.retain(|e| e.at <= limit);
    }
    entries
}

/// Of the entries a rules or conditions kind dates in one second, only the one its rules put
/// first: conditions that are true together and were set in the same second read, live, as
/// that one phase alone (a JobSet restarting writes `RestartingJobSet` and
/// `StartupPolicyInProgress` at once; the second is no pending stay of its own). Whether the
/// others were ever seen alone within that second cannot be told; a stay is not invented for
/// them.
fn one_per_second(entries: &mut Vec<Step>) {
    // Sorted by (time, rank): the last of each time is the highest-ranked.
    let mut kept: Vec<Step> = Vec::with_capacity(entries.len());
    for e in entries.drain(..) {
        if kept.last().is_some_and(|l| l.at == e.at) {
            kept.pop();
        }
        kept.push(e);
    }
    *entries = kept;
}

/// Sorted entries folded into stays (consecutive entries of one phase into the first),
/// numbered.
fn fold(entries: Vec<Step>) -> Vec<Step> {
    let mut folded: Vec<Step> = Vec::with_capacity(entries.len());
    for (entry, e) in entries.into_iter().enumerate() {
        if folded.last().is_some_and(|l| l.phase == e.phase) {
            continue;
        }
        let ordinal = folded.len();
        let occurrence = 1 + folded
            .iter()
            .filter(|f| f.phase == e.phase && f.at_text == e.at_text)
            .count() as u32;
        folded.push(Step {
            ordinal,
            occurrence,
            entry,
            ..e
        });
    }
    folded
}

fn parse_time(text: &str) -> Option<DateTime<FixedOffset>> {
    DateTime::parse_from_rfc3339(text).ok()
}

fn text<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

fn non_empty(v: &Value, key: &str) -> Option<String> {
    text(v, key).filter(|s| !s.is_empty()).map(str::to_string)
}

/// `status.conditions` entries, or nothing when that is not an array.
fn conditions(object: &Value) -> impl Iterator<Item = &Value> {
    at(object, "/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// A step at the condition's `lastTransitionTime`, if it has a usable one.
fn step_at(c: &Value, phase: Phase, raw: &str, rank: usize, with_text: bool) -> Option<Step> {
    let at_text = text(c, "lastTransitionTime")?;
    Some(Step {
        phase,
        raw: raw.to_string(),
        reason: with_text.then(|| non_empty(c, "reason")).flatten(),
        message: with_text.then(|| non_empty(c, "message")).flatten(),
        at: parse_time(at_text)?,
        at_text: at_text.to_string(),
        rank,
        ordinal: 0,
        occurrence: 1,
        entry: 0,
    })
}

/// True conditions whose type is in `table` (type, phase, tie rank).
fn true_conditions(object: &Value, table: &[(&str, Phase, usize)]) -> Vec<Step> {
    conditions(object)
        .filter(|c| text(c, "status") == Some("True"))
        .filter_map(|c| {
            let ty = text(c, "type")?;
            let (_, phase, rank) = table.iter().find(|(t, _, _)| *t == ty)?;
            step_at(c, *phase, ty, *rank, true)
        })
        .collect()
}

/// Volcano: every `{status: <JobPhase>, lastTransitionTime}` entry, in array order.
fn volcano(object: &Value) -> Vec<Step> {
    conditions(object)
        .filter_map(|c| {
            let raw = text(c, "status").filter(|s| !s.is_empty())?;
            step_at(c, volcano_phase(raw), raw, 0, false)
        })
        .collect()
}

/// Kubeflow condition types in lifecycle order (the tie rank is the index). Must agree with
/// the normalizer's precedence table, which is this list backwards (checked by a test).
const KUBEFLOW_LIFECYCLE: [(&str, Phase); 6] = [
    ("Created", Phase::Pending),
    ("Running", Phase::Running),
    ("Restarting", Phase::Restarting),
    ("Suspended", Phase::Suspended),
    ("Succeeded", Phase::Succeeded),
    ("Failed", Phase::Failed),
];

/// Kubeflow: true conditions, plus a False Running condition as proof that the job ran.
fn kubeflow(object: &Value) -> Vec<Step> {
    let table: Vec<(&str, Phase, usize)> = KUBEFLOW_LIFECYCLE
        .iter()
        .enumerate()
        .map(|(i, (t, p))| (*t, *p, i))
        .collect();
    let mut steps = true_conditions(object, &table);
    steps.extend(
        conditions(object)
            .filter(|c| text(c, "type") == Some("Running") && text(c, "status") == Some("False"))
            .filter(|c| !text(c, "reason").is_some_and(|r| r.ends_with("Suspended")))
            .filter_map(|c| step_at(c, Phase::Running, "Running", 1, false)),
    );
    steps
}

/// batch/v1 conditions and their phases (tie rank: interim before final). Same mapping as the
/// normalizer (checked by a test).
const BATCH_CONDITIONS: [(&str, Phase, usize); 5] = [
    ("Suspended", Phase::Suspended, 1),
    ("SuccessCriteriaMet", Phase::Succeeded, 2),
    ("FailureTarget", Phase::Failed, 2),
    ("Complete", Phase::Succeeded, 3),
    ("Failed", Phase::Failed, 3),
];

/// batch/v1: true conditions, plus running at `startTime` when the counts show pods existed.
fn batch(object: &Value) -> Vec<Step> {
    let mut steps = true_conditions(object, &BATCH_CONDITIONS);
    let count = |key: &str| {
        object
            .get("status")
            .and_then(|status| status.get(key))
            .and_then(Value::as_i64)
            .unwrap_or(0)
    };
    let had_pods = ["active", "ready", "succeeded", "failed", "terminating"]
        .into_iter()
        .any(|k| count(k) > 0);
    if had_pods
        && let Some(status) = object.get("status")
        && let Some(step) = start_time_step(status)
    {
        steps.push(step);
    }
    steps
}

fn start_time_step(status: &Value) -> Option<Step> {
    let at_text = text(status, "startTime")?;
    Some(Step {
        phase: Phase::Running,
        raw: "Active".to_string(),
        reason: None,
        message: None,
        at: parse_time(at_text)?,
        at_text: at_text.to_string(),
        rank: 0,
        ordinal: 0,
        occurrence: 1,
        entry: 0,
    })
}

#[cfg(test)]
mod tests;
