//! Job lifecycle drivers: play the training operators' part against a [`SimCluster`].
//!
//! A [`JobDriver`] creates a job of one [`Flavor`] with a realistic spec, labels and pods (pods
//! carry the flavour's job-name label and an owner reference to the job, and get logs), then
//! moves it through phases by writing the status JSON that flavour's controller writes. Each
//! step returns the job's new resourceVersion so tests can wait for exactly that event.
//!
//! Timestamps come from an internal clock, written in whole seconds as the controllers write
//! them. How it moves is the driver's [`Pace`]: by default at least one second per step, so
//! `lastTransitionTime`s are strictly increasing and their order is meaningful; `Pace::Wall`
//! stamps each step with the wall time, so steps played within one second share a time, as
//! a real controller's fast transitions do; `Pace::Manual` moves only when the test says.
//!
//! What each step writes (job status; pod statuses change alongside, written first):
//!
//! | step | batch/v1 Job | Volcano Job | PyTorchJob / MPIJob |
//! |---|---|---|---|
//! | `pending` | counts only (`ready: 0`) | phase `Pending` | `Created` |
//! | `running` | `active`/`ready` = pods, `startTime` | phase `Running` | `Running`, `startTime` (adds `Created` if missing) |
//! | `restarting` | `ready` one less (container restarted) | phase `Restarting`, `retryCount`+1, `version`+1 | `Restarting` (replaces `Running`) |
//! | `completing` | `SuccessCriteriaMet`, `succeeded` | phase `Completing` | error: no such phase |
//! | `succeeded` | `completing` if needed, then `Complete` + `completionTime` | `completing` if needed, then `Completed` | `Succeeded` (Running→False), `completionTime` |
//! | `failing(r)` | `FailureTarget` (reason `r`), `failed`+1 | error | error |
//! | `failed(r)` | `failing` if needed, then `Failed` | phase `Failed` (reason `r`) | `Failed` (reason `r`), `completionTime` |
//! | `suspended` | `spec.suspend=true`, then `Suspended` | `Aborting`, then `Aborted` | `spec.runPolicy.suspend=true`, then `Suspended` (Running→False) |
//! | `resumed` | `spec.suspend=false`, then `Suspended=False` | phase `Restarting` (`ResumeJob`) | `spec.runPolicy.suspend=false`, then `Suspended=False` |
//! | `aborted` | error | `Aborting`, then `Aborted` | error |
//! | `terminated(r)` | error | `Terminating`, then `Terminated` | error |
//! | `delete` | DELETE (marked if finalizers; pods garbage-collected on removal) | same | same |
//!
//! Pods are left alone by `suspended`/`resumed` (real controllers delete and recreate them).

mod batch;
mod builder;
mod driver;
mod kubeflow;
mod pods;
mod spec;
mod steps;
mod volcano;

use crate::sim::Gvr;

pub use builder::JobBuilder;
pub use driver::{JobDriver, Pace};
pub use pods::PodInfo;

/// The kinds of training job the driver can play.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Flavor {
    /// `batch/v1 Job`.
    Batch,
    /// Volcano `batch.volcano.sh/v1alpha1 Job`.
    Volcano,
    /// Kubeflow `kubeflow.org/v1 PyTorchJob`.
    PyTorch,
    /// Kubeflow `kubeflow.org/v2beta1 MPIJob`.
    Mpi,
}

impl Flavor {
    /// Every flavour.
    pub const ALL: [Flavor; 4] = [Flavor::Batch, Flavor::Volcano, Flavor::PyTorch, Flavor::Mpi];

    /// The resource the jobs live in.
    pub fn gvr(self) -> Gvr {
        match self {
            Flavor::Batch => Gvr::BATCH_JOB,
            Flavor::Volcano => Gvr::VOLCANO_JOB,
            Flavor::PyTorch => Gvr::PYTORCH_JOB,
            Flavor::Mpi => Gvr::MPI_JOB_V2,
        }
    }

    /// The job `kind`.
    pub fn kind(self) -> &'static str {
        match self {
            Flavor::Batch | Flavor::Volcano => "Job",
            Flavor::PyTorch => "PyTorchJob",
            Flavor::Mpi => "MPIJob",
        }
    }

    /// The label that names the job on its pods.
    pub fn pod_label(self) -> &'static str {
        match self {
            Flavor::Batch => "batch.kubernetes.io/job-name",
            Flavor::Volcano => "volcano.sh/job-name",
            Flavor::PyTorch | Flavor::Mpi => "training.kubeflow.org/job-name",
        }
    }

    fn is_kubeflow(self) -> bool {
        matches!(self, Flavor::PyTorch | Flavor::Mpi)
    }

    /// Replica type names in `replicaStatuses` (Kubeflow), leader first.
    fn roles(self) -> (&'static str, &'static str) {
        match self {
            Flavor::Mpi => ("Launcher", "Worker"),
            _ => ("Master", "Worker"),
        }
    }
}

/// What a status writer needs to know.
pub(crate) struct Ctx<'a> {
    pub kind: &'static str,
    pub namespace: &'a str,
    pub name: &'a str,
    /// Timestamp of this step.
    pub now: String,
    /// Worker replicas.
    pub workers: u32,
    /// All pods (workers plus master/launcher; for batch, the parallelism).
    pub total: u32,
}
