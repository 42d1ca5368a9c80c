//! The AI kinds' side of the steps: each step in `steps.rs` hands a TrainJob, JobSet or RayJob
//! to its kind's module as a [`Step`], because their controllers write different things for
//! the same phase (conditions and child-Job counts vs. two enums) and a step often takes
//! several writes. Also here: the steps only these kinds (and the batch Job) have — Kueue's
//! admission of a job created suspended — and RayJob's `stopped`.

use anyhow::bail;

use super::{Flavor, JobDriver, batch, jobset, rayjob, trainjob};

/// A lifecycle step as a kind's module plays it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step<'a> {
    /// What the controller writes right after a job was created with `spec.suspend: true`.
    CreatedSuspended,
    Pending,
    Running,
    Restarting,
    Succeeded,
    /// With the reason; empty means the kind's usual one.
    Failed(&'a str),
    /// RayJob only.
    Stopped,
    Suspended,
    Resumed,
}

impl JobDriver {
    /// Plays `step` for an AI kind; `now` is the time of its first write. A step that makes no
    /// sense for the kind is an error before anything is written.
    pub(super) fn play(&mut self, step: Step, now: String) -> anyhow::Result<String> {
        match self.flavor {
            Flavor::TrainJob => trainjob::play(self, step, now),
            Flavor::JobSet => jobset::play(self, step, now),
            Flavor::RayJob => rayjob::play(self, step, now),
            other => bail!("{} is not one of the AI kinds", other.kind()),
        }
    }

    /// Right after creation with `spec.suspend: true`: whatever the controller writes for it.
    pub(super) fn settle_created_suspended(&mut self) -> anyhow::Result<String> {
        let now = self.tick();
        if self.flavor == Flavor::Batch {
            // The job controller says so at once: `Suspended=True/JobSuspended`.
            return self.write_status(&now, batch::suspended);
        }
        self.play(Step::CreatedSuspended, now)
    }

    /// RayJob only: the Ray job was stopped (`ray job stop`): `Complete` with
    /// `jobStatus: STOPPED` — KubeRay counts a stopped job as complete, not failed.
    pub fn stopped(&mut self) -> anyhow::Result<String> {
        if self.flavor != Flavor::RayJob {
            bail!("only RayJobs can be stopped, not a {}", self.flavor.kind());
        }
        let now = self.tick();
        self.play(Step::Stopped, now)
    }

    /// Kueue admits a suspended job (one built
    /// [`created_suspended`](super::JobBuilder::created_suspended), or suspended since):
    /// `spec.suspend=false` and what the controller writes on resume (as
    /// [`JobDriver::resumed`]), then the pods are created and start (as
    /// [`JobDriver::running`]). Returns the RV after the last write. batch Job, TrainJob,
    /// JobSet and RayJob only; an error when the job is not suspended.
    pub fn admitted(&mut self) -> anyhow::Result<String> {
        if !self.flavor.waits_for_admission() {
            bail!(
                "only batch Job, TrainJob, JobSet and RayJob wait for admission, not a {}",
                self.flavor.kind()
            );
        }
        let suspended = self.object()?["spec"]["suspend"].as_bool().unwrap_or(false);
        if !suspended {
            bail!(
                "{} {}/{} is not suspended",
                self.flavor.kind(),
                self.namespace,
                self.name
            );
        }
        self.resumed()?;
        let deferred = std::mem::take(&mut self.deferred_pods);
        if !deferred.is_empty() {
            self.create_pods(deferred)?;
        }
        self.running()
    }
}
