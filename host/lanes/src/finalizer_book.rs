//! Which plugins still owe a held job its deletion.
//!
//! When a job of a kind with `finalizer: true` is being deleted (it has a deletionTimestamp and
//! still carries jobrelay's finalizer), the dispatcher records a hold naming every lane that
//! wants the kind. Each lane reports when it has nothing queued or running for the job any more
//! (its last event delivered or dead-lettered); when no lane is left, the finalizer is released.
//! With `finalizers.dead_letter_blocks`, a lane that dead-lettered an event of the job keeps
//! the hold until the sweep below.
//!
//! Deletion never hangs forever because of jobrelay: holds older than `max_hold_seconds` are
//! released by [`FinalizerBook::sweep`], whatever the lanes say.

use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use jobrelay_contract::event::JobKey;
use jobrelay_watch::kinds::JobKind;

/// A held job, as the releaser needs it.
#[derive(Debug, Clone)]
pub struct HeldJob {
    /// The job's cluster.
    pub cluster: String,
    /// The configured kind, for the resource the patch goes to.
    pub kind: Arc<JobKind>,
    /// The job's namespace.
    pub namespace: String,
    /// The job's name.
    pub name: String,
    /// The job's uid, so a job re-created under the name is not touched.
    pub uid: String,
}

/// Removes jobrelay's finalizer from a job (implemented by the clusters, which own the clients).
pub trait Release: Send + Sync {
    /// Starts removing the finalizer from `job` and returns at once: the book must not wait
    /// on a cluster's API server, and a failed removal is the releaser's to retry.
    fn release(&self, job: HeldJob);
}

struct Hold {
    job: HeldJob,
    waiting: HashSet<String>,
    blocked: HashSet<String>,
    since: Instant,
}

/// The open holds.
pub struct FinalizerBook {
    holds: Mutex<HashMap<JobKey, Hold>>,
    releaser: Arc<dyn Release>,
    dead_letter_blocks: bool,
}

impl FinalizerBook {
    /// An empty book whose holds end through `releaser`. With `dead_letter_blocks`, a lane
    /// that dead-lettered an event of a held job keeps the hold until the sweep.
    pub fn new(releaser: Arc<dyn Release>, dead_letter_blocks: bool) -> FinalizerBook {
        FinalizerBook {
            holds: Mutex::new(HashMap::new()),
            releaser,
            dead_letter_blocks,
        }
    }

    /// Hold `job` until every lane in `lanes` is done with it. A hold that exists is kept as
    /// it is (a held job is observed again each time its object changes).
    pub fn hold(&self, job: HeldJob, lanes: Vec<String>) {
        let key = JobKey {
            cluster: job.cluster.clone(),
            uid: job.uid.clone(),
        };
        let mut holds = self.holds.lock();
        if holds.contains_key(&key) {
            return;
        }
        if lanes.is_empty() {
            drop(holds);
            self.releaser.release(job);
            return;
        }
        tracing::debug!(job = %job.name, lanes = ?lanes, "deletion held until the plugins are done");
        holds.insert(
            key,
            Hold {
                job,
                waiting: lanes.into_iter().collect(),
                blocked: HashSet::new(),
                since: Instant::now(),
            },
        );
    }

    /// A lane has nothing queued or running for the job.
    pub fn lane_done(&self, lane: &str, key: &JobKey) {
        let released = {
            let mut holds = self.holds.lock();
            let Some(hold) = holds.get_mut(key) else {
                return;
            };
            hold.waiting.remove(lane);
            if hold.waiting.is_empty() && hold.blocked.is_empty() {
                holds.remove(key).map(|h| h.job)
            } else {
                None
            }
        };
        if let Some(job) = released {
            self.releaser.release(job);
        }
    }

    /// A lane dead-lettered an event of a held job. Under `dead_letter_blocks` the hold stays
    /// until the sweep; otherwise this changes nothing.
    pub fn lane_dead_lettered(&self, lane: &str, key: &JobKey) {
        if !self.dead_letter_blocks {
            return;
        }
        let mut holds = self.holds.lock();
        if let Some(hold) = holds.get_mut(key) {
            hold.blocked.insert(lane.to_string());
        }
    }

    /// A plugin was removed: it owes no job anything any more.
    pub fn forget_lane(&self, lane: &str) {
        let released: Vec<HeldJob> = {
            let mut holds = self.holds.lock();
            for hold in holds.values_mut() {
                hold.waiting.remove(lane);
                hold.blocked.remove(lane);
            }
            let done: Vec<JobKey> = holds
                .iter()
                .filter(|(_, h)| h.waiting.is_empty() && h.blocked.is_empty())
                .map(|(k, _)| k.clone())
                .collect();
            done.iter()
                .filter_map(|k| holds.remove(k))
                .map(|h| h.job)
                .collect()
        };
        for job in released {
            self.releaser.release(job);
        }
    }

    /// Drops the holds on one cluster's jobs without releasing them: another replica took the
    /// cluster over and holds them itself.
    pub fn forget_cluster(&self, cluster: &str) {
        let mut holds = self.holds.lock();
        holds.retain(|key, _| key.cluster != cluster);
    }

    /// Release holds older than `max_hold`.
    pub fn sweep(&self, max_hold: Duration) {
        let expired: Vec<HeldJob> = {
            let mut holds = self.holds.lock();
            let keys: Vec<JobKey> = holds
                .iter()
                .filter(|(_, h)| h.since.elapsed() >= max_hold)
                .map(|(k, _)| k.clone())
                .collect();
            keys.iter()
                .filter_map(|k| holds.remove(k))
                .map(|h| {
                    tracing::warn!(job = %h.job.name, waiting = ?h.waiting, blocked = ?h.blocked,
                        "deletion held too long; releasing the finalizer anyway");
                    h.job
                })
                .collect()
        };
        for job in expired {
            self.releaser.release(job);
        }
    }

    /// Number of jobs held now.
    pub fn len(&self) -> usize {
        self.holds.lock().len()
    }

    /// Whether no job is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Recorder(Mutex<Vec<String>>);

    impl Release for Recorder {
        fn release(&self, job: HeldJob) {
            self.0.lock().push(job.uid);
        }
    }

    fn job(uid: &str) -> HeldJob {
        HeldJob {
            cluster: "c".into(),
            kind: Arc::new(JobKind::builtin("volcano-job").expect("built-in")),
            namespace: "ns".into(),
            name: format!("job-{uid}"),
            uid: uid.into(),
        }
    }

    fn key(uid: &str) -> JobKey {
        JobKey {
            cluster: "c".into(),
            uid: uid.into(),
        }
    }

    fn released(r: &Recorder) -> Vec<String> {
        r.0.lock().clone()
    }

    #[test]
    fn released_when_the_last_lane_is_done() {
        let r = Arc::new(Recorder::default());
        let book = FinalizerBook::new(r.clone(), false);
        book.hold(job("u1"), vec!["a".into(), "b".into()]);
        book.lane_done("a", &key("u1"));
        assert!(released(&r).is_empty());
        book.hold(job("u1"), vec!["a".into(), "b".into()]); // observed again: kept as is
        book.lane_done("b", &key("u1"));
        assert_eq!(released(&r), ["u1"]);
        book.lane_done("b", &key("u1"));
        assert_eq!(released(&r), ["u1"], "released once");
    }

    #[test]
    fn no_lane_means_release_at_once_and_dead_letters_follow_the_policy() {
        let r = Arc::new(Recorder::default());
        let book = FinalizerBook::new(r.clone(), true);
        book.hold(job("u1"), vec![]);
        assert_eq!(released(&r), ["u1"]);
        book.hold(job("u2"), vec!["a".into()]);
        book.lane_dead_lettered("a", &key("u2"));
        book.lane_done("a", &key("u2"));
        assert_eq!(
            released(&r),
            ["u1"],
            "a dead letter blocks under the policy"
        );
        book.sweep(Duration::ZERO);
        assert_eq!(released(&r), ["u1", "u2"], "the sweep always ends a hold");
        assert!(book.is_empty());
    }

    #[test]
    fn a_removed_plugin_owes_nothing() {
        let r = Arc::new(Recorder::default());
        let book = FinalizerBook::new(r.clone(), false);
        book.hold(job("u1"), vec!["a".into(), "gone".into()]);
        book.hold(job("u2"), vec!["gone".into()]);
        book.forget_lane("gone");
        assert_eq!(released(&r), ["u2"]);
        book.lane_done("a", &key("u1"));
        assert_eq!(released(&r), ["u2", "u1"]);
    }
}
