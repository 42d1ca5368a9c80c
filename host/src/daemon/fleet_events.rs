//! Fleet events from what the daemon judges: a cluster's availability crossing a threshold
//! (from the health board) and a fleet rule starting or ceasing to hold (from the rules'
//! evaluation), made into carriers ([`jobrelay_contract::fleet`]) and routed to the lanes of
//! the plugins that asked for them.

use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::clusters::health::{AvailabilityChange, rfc3339};
use jobrelay_contract::fleet::{FleetEvent, FleetEventKind};
use jobrelay_fleet::availability::Change;
use jobrelay_fleet::jobs::JobView;
use jobrelay_fleet::rules::spec::FleetSettings;
use jobrelay_fleet::rules::{RuleChange, RuleReading, Rules};
use jobrelay_fleet::timers::{TimerChange, Timers};
use jobrelay_lanes::dispatcher::Routes;
use jobrelay_state::PluginKv;

/// Makes and routes fleet events.
#[derive(Clone)]
pub struct FleetAnnouncer {
    routes: Routes,
    versions: Arc<Versions>,
}

/// The version numbers of carriers: milliseconds since the epoch when the event was made, one
/// more than the last when two fall in the same millisecond. A subject's versions only need
/// to differ from each other (the lanes judge a new one by its state, and its id names the
/// version): a clock is what keeps them apart across restarts of the process, which a counter
/// starting again at 1 would not.
#[derive(Default)]
struct Versions {
    last: AtomicU64,
}

impl Versions {
    fn next(&self) -> u64 {
        let now = chrono::Utc::now().timestamp_millis().max(0) as u64;
        let mut last = self.last.load(Ordering::SeqCst);
        loop {
            let next = now.max(last + 1);
            match self
                .last
                .compare_exchange(last, next, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => return next,
                Err(seen) => last = seen,
            }
        }
    }
}

impl FleetAnnouncer {
    pub fn new(routes: Routes) -> FleetAnnouncer {
        FleetAnnouncer {
            routes,
            versions: Arc::default(),
        }
    }

    /// A cluster went offline or came back online.
    pub fn availability(&self, change: AvailabilityChange) {
        self.send(availability_event(
            change,
            chrono::Utc::now().timestamp_millis(),
        ));
    }

    /// A rule started or ceased to hold on a cluster.
    pub fn rule(&self, change: RuleChange, now_ms: i64) {
        if change.firing {
            tracing::warn!(rule = %change.rule, cluster = %change.cluster, value = change.value,
                threshold = change.threshold, "fleet rule firing: {}", change.summary);
        } else {
            tracing::info!(rule = %change.rule, cluster = %change.cluster, value = change.value,
                "fleet rule resolved (or first judged not holding): {}", change.summary);
        }
        self.send(rule_event(change, now_ms));
    }

    /// A timer started or stopped firing on a job.
    pub fn timer(&self, change: TimerChange, now_ms: i64) {
        if change.firing {
            tracing::warn!(timer = %change.timer, cluster = %change.cluster,
                namespace = %change.namespace, job = %change.name, value = change.value,
                "timer firing: {}", change.summary);
        } else {
            tracing::info!(timer = %change.timer, cluster = %change.cluster,
                namespace = %change.namespace, job = %change.name, "timer resolved: {}",
                change.summary);
        }
        self.send(timer_event(change, now_ms));
    }

    /// Whether the events announced reach the lanes (this replica leads, or runs alone).
    pub fn delivering(&self) -> bool {
        self.routes.delivering()
    }

    /// Routes one event (its id is set from its carrier).
    pub fn send(&self, event: FleetEvent) {
        let carrier = event.into_job_event(self.versions.next());
        self.routes.route_fleet(carrier);
    }
}

/// The fleet event of a cluster's availability change, made at `now_ms`: what the daemon
/// hands plugins, and what `plugin sample-event --fleet cluster-offline` prints.
pub fn availability_event(change: AvailabilityChange, now_ms: i64) -> FleetEvent {
    let (kind, since, summary) = match change.change {
        Change::Offline { since } => (
            FleetEventKind::ClusterOffline,
            since,
            format!(
                "cluster {} is offline: {} health checks failed in a row since {}; last \
                 error: {}{}",
                change.cluster,
                change.failed_checks,
                rfc3339(since),
                change.last_error.as_deref().unwrap_or("none recorded"),
                change
                    .source_says
                    .as_deref()
                    .map(|says| format!("; its source says: {says}"))
                    .unwrap_or_default()
            ),
        ),
        Change::Online { since } => (
            FleetEventKind::ClusterOnline,
            since,
            format!(
                "cluster {} is back online: its health checks pass again since {}",
                change.cluster,
                rfc3339(since)
            ),
        ),
    };
    FleetEvent {
        id: String::new(),
        kind,
        cluster: change.cluster,
        rule: None,
        job_uid: None,
        group: None,
        value: None,
        threshold: None,
        since: rfc3339(since),
        time: rfc3339(now_ms),
        summary,
    }
}

/// The fleet event of a rule's change, made at `now_ms` (see [`availability_event`]).
pub fn rule_event(change: RuleChange, now_ms: i64) -> FleetEvent {
    FleetEvent {
        id: String::new(),
        kind: if change.firing {
            FleetEventKind::RuleFiring
        } else {
            FleetEventKind::RuleResolved
        },
        cluster: change.cluster,
        rule: Some(change.rule),
        job_uid: None,
        group: change.group,
        value: Some(change.value),
        threshold: Some(change.threshold),
        since: rfc3339(change.since.saturating_mul(1000)),
        time: rfc3339(now_ms),
        summary: change.summary,
    }
}

/// The fleet event of a timer's change on one job, made at `now_ms`: a rule event whose
/// subject is the timer on that job, so each job's firing and resolution are told once.
pub fn timer_event(change: TimerChange, now_ms: i64) -> FleetEvent {
    FleetEvent {
        id: String::new(),
        kind: if change.firing {
            FleetEventKind::RuleFiring
        } else {
            FleetEventKind::RuleResolved
        },
        cluster: change.cluster,
        rule: Some(change.timer),
        job_uid: Some(change.uid),
        group: None,
        value: Some(f64::from(change.value)),
        threshold: Some(f64::from(change.threshold)),
        since: rfc3339(i64::from(change.since).saturating_mul(1000)),
        time: rfc3339(now_ms),
        summary: change.summary,
    }
}

/// The fleet rules and their verdicts, shared by the evaluation task, the control loop (which
/// sets them from the main file) and `/metrics`.
#[derive(Default)]
pub struct RuleBook {
    rules: Mutex<Rules>,
    timers: Mutex<Timers>,
    interval_ms: AtomicU64,
}

impl RuleBook {
    pub fn new(settings: &FleetSettings) -> Arc<RuleBook> {
        let book = Arc::new(RuleBook::default());
        book.set(settings);
        book
    }

    /// The main file's rules, from now on (unchanged rules keep their verdicts).
    pub fn set(&self, settings: &FleetSettings) {
        self.interval_ms.store(
            settings.evaluate_interval.as_millis() as u64,
            Ordering::SeqCst,
        );
        self.lock().set_rules(settings.rules.clone());
        self.timers.lock().set_timers(settings.timers.clone());
    }

    /// Makes the next evaluation tell every rule's verdict again ([`Rules::tell_again`]): at
    /// a take-over.
    pub fn tell_again(&self) {
        self.lock().tell_again();
    }

    /// Per configured timer, how many jobs it fires on.
    pub fn timers_firing(&self) -> Vec<(String, usize)> {
        self.timers.lock().counts()
    }

    pub fn readings(&self) -> Vec<RuleReading> {
        self.lock().readings()
    }

    fn lock(&self) -> parking_lot::MutexGuard<'_, Rules> {
        self.rules.lock()
    }

    fn interval(&self) -> Duration {
        Duration::from_millis(self.interval_ms.load(Ordering::SeqCst).max(100))
    }
}

/// The owner the counting timers' times are kept under in the state store's key-value table:
/// a name no plugin can have (a plugin is named by its manifest's file, and a file whose name
/// begins with a dot is hidden and never read).
pub const COUNTED_TIMES_OWNER: &str = ".timers";

/// Judges the rules on the job view's SLIs and the timers on its jobs every
/// `fleet.evaluate_interval_ms`, and announces what changed, until `cancel`. The rules are
/// judged on a follower too (their verdicts stay current; the routes deliver nothing there);
/// the timers only where this replica delivers (see [`Timers::forget_firings`]). The counting
/// timers' times are read from `kv` before the first pass that judges one, and what a pass
/// counted is written back before any timer fires on it ([`jobrelay_fleet::timers`]).
pub async fn evaluate_rules(
    book: Arc<RuleBook>,
    view: Arc<JobView>,
    announcer: FleetAnnouncer,
    kv: Arc<dyn PluginKv>,
    cancel: CancellationToken,
) {
    // The firings' generation the job view's marks were last written at (none: no marks).
    let mut marked: Option<u64> = None;
    // Failed reads and writes of the counted times, warned at powers of two.
    let mut store_failures: u64 = 0;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(book.interval()) => {}
            _ = cancel.cancelled() => return,
        }
        let now = chrono::Utc::now();
        if !book.lock().rules().is_empty() {
            let rows = view.slis().snapshot();
            let changes = book.lock().evaluate(&rows, now.timestamp());
            for change in changes {
                announcer.rule(change, now.timestamp_millis());
            }
        }
        if announcer.delivering() && book.timers.lock().needs_counts() {
            match kv.kv_entries(COUNTED_TIMES_OWNER).await {
                Ok(entries) => {
                    let entries = entries
                        .into_iter()
                        .map(|(k, v)| (k, String::from_utf8_lossy(&v).into_owned()))
                        .collect();
                    let skipped = book.timers.lock().load_counts(entries);
                    if skipped > 0 {
                        tracing::warn!(
                            skipped,
                            "counted times in the state store that could \
                            not be read were skipped: those jobs are counted afresh"
                        );
                    }
                }
                Err(e) => warn_store(&mut store_failures, "read", &e),
            }
        }
        let changes = {
            let mut timers = book.timers.lock();
            // A follower keeps no firing: what it announced reached no plugin, and the leader
            // it replaces may have died before delivering; its first pass as leader fires
            // every standing stay again (the shared cursors drop what was delivered).
            if !announcer.delivering() {
                timers.forget_firings();
            }
            if timers.timers().is_empty() || !announcer.delivering() {
                // Timers removed from the main file, or a follower's, leave no mark on the
                // view's jobs.
                if marked.take().is_some() {
                    view.set_firing(Vec::new());
                }
                continue;
            }
            let mut pass = timers.pass(u32::try_from(now.timestamp()).unwrap_or(u32::MAX));
            view.judge_timers(&mut pass);
            let changes = pass.end();
            // Rewritten only when the firings changed: each rewrite takes every cluster's
            // write lock, which the event path waits out.
            if marked != Some(timers.generation()) {
                view.set_firing(timers.firing_jobs());
                marked = Some(timers.generation());
            }
            changes
        };
        for change in changes {
            announcer.timer(change, now.timestamp_millis());
        }
        let unsaved = book.timers.lock().unsaved_counts();
        let mut saved = Vec::with_capacity(unsaved.len());
        // One entry the store refuses (a key too long for its column) must not hold back the
        // others; three refusals in a row are taken for a store that is down, until the next
        // evaluation.
        let mut refused_in_a_row = 0;
        for entry in unsaved {
            if refused_in_a_row == 3 {
                break;
            }
            let kept = kv
                .kv_set(
                    COUNTED_TIMES_OWNER,
                    &entry.key,
                    entry.text.as_bytes(),
                    Some(entry.keep_for.max(1)),
                )
                .await;
            match kept {
                Ok(()) => {
                    refused_in_a_row = 0;
                    saved.push(entry);
                }
                Err(e) => {
                    refused_in_a_row += 1;
                    warn_store(&mut store_failures, "write", &e);
                }
            }
        }
        book.timers.lock().counts_saved(&saved);
    }
}

/// Warns of a failed read or write of the counted times, at the first and then at powers of
/// two: the store's own health is on `/readyz`; a counting timer fires once it is back.
fn warn_store(failures: &mut u64, what: &str, e: &jobrelay_state::StoreError) {
    *failures += 1;
    if failures.is_power_of_two() {
        tracing::warn!(failures = *failures, error = %e, "could not {what} the counting timers' \
            times in the state store: no counting timer fires on times not stored");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Versions never repeat, even when many are made in the same millisecond.
    #[test]
    fn versions_grow() {
        let v = Versions::default();
        let mut last = 0;
        for _ in 0..10_000 {
            let next = v.next();
            assert!(next > last);
            last = next;
        }
    }
}
