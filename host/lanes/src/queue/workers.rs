//! The pool of a lane's workers as counts and a ready list: who may start, who waits.

use std::collections::VecDeque;
use std::sync::Arc;

use super::job_state::JobState;
use jobrelay_contract::uid::Uid;

/// The lane's workers: at most `max` ([`MAX_WORKERS`]) at once, each draining one job at a
/// time; a job claimed while all are busy waits in `ready`, in the order it was claimed, and
/// the next worker to finish its job takes it. A worker costs a task (about a kilobyte); a
/// job waiting for one costs its key here, so a backlog over a million jobs does not hold a
/// million tasks.
#[derive(Debug)]
pub(super) struct Workers {
    pub(super) running: usize,
    pub(super) max: usize,
    /// Claimed jobs waiting for a worker. A key whose job was forgotten or let go meanwhile
    /// (no longer `ready`) is skipped.
    pub(super) ready: VecDeque<(Arc<str>, Uid)>,
}

impl Default for Workers {
    fn default() -> Workers {
        Workers {
            running: 0,
            max: MAX_WORKERS,
            ready: VecDeque::new(),
        }
    }
}

impl Workers {
    /// A worker for a job just claimed: `true` if one may start for it now; otherwise the job
    /// waits for the next free one.
    pub(super) fn assign(&mut self, job: &mut JobState, cluster: Arc<str>, uid: Uid) -> bool {
        if self.running < self.max {
            self.running += 1;
            return true;
        }
        job.ready = true;
        self.ready.push_back((cluster, uid));
        false
    }
}

/// Most workers of one lane at once: calls are bounded by the plugin's concurrency, and the
/// rest wait for a permit, a rate limit or a retry's backoff. This many lets that many jobs
/// be in retry waits before the others' turns are delayed, at a kilobyte or so each.
pub const MAX_WORKERS: usize = 1_024;

/// Room the ready queue keeps once it is empty.
pub(super) const READY_ROOM_KEPT: usize = 1_024;
