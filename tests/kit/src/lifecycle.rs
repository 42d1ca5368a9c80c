//! Job lifecycle drivers: play the training operators' part against a
//! [`SimCluster`](crate::SimCluster).
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
//! | `stopped` | error | error | error |
//! | `created_suspended` (builder) | `spec.suspend=true`, `Suspended=True/JobSuspended`, no pods | error | error |
//! | `admitted` | `resumed`, the pods created, `running` | error | error |
//! | `pod_fails(c)` | the first pod's status as the kubelet writes it for `c` ([`PodFailure`]) | same | same |
//! | `delete` | DELETE (marked if finalizers; pods garbage-collected on removal) | same | same |
//!
//! The AI kinds have no phase field: a `TrainJob` ([`trainjob`]) and a `JobSet` ([`jobset`])
//! tell their state by `metav1.Condition`s and per-replicated-job counts of child Jobs
//! (`C:` = condition type=status/reason; `{..}` = the counts of every entry), a `RayJob`
//! ([`rayjob`]) by two enums, `jobDeploymentStatus` / `jobStatus` (`""` = field absent):
//!
//! | step | TrainJob | JobSet | RayJob |
//! |---|---|---|---|
//! | `pending` | `jobsStatus` node `{active:1}` | `replicatedJobsStatus` `{active}`, `restarts:0`; in order: only the leader's, `C:StartupPolicyInProgress=True` | `Initializing`, `startTime`, `jobId`, `rayClusterName`, `succeeded:0`, `failed:0` |
//! | `running` | node `{active:1, ready:1}` (no condition) | `{active, ready}`; a recorded `C:RestartingJobSet` → `False/JobsReady`; in order: leader ready + `C:StartupPolicyInProgress=True`, then all ready + `C:StartupPolicyCompleted=True` (InProgress→False) | `pending` if new; `Running`/`PENDING` (`dashboardURL`), then `RUNNING` (`rayJobInfo.startTime`) |
//! | `restarting` | node `{failed:1}`, then `{active:1, ready:1}` | `C:RestartingJobSet=True/DefaultFailurePolicy`, `restarts`+1, leader `{failed:1}`, workers all 0; in order the same write also has `C:StartupPolicyInProgress=True` (Completed→False); then `C:RestartingJobSet=False/JobsReady`, all ready (in order: `C:StartupPolicyCompleted=True`) | `Retrying`/`FAILED` (`AppFailed`), `failed`+1; then `""` (ids reset); then `Initializing`, new `startTime` |
//! | `succeeded` | `C:Complete=True/AllJobsCompleted`, node `{succeeded:1}` | `C:Completed=True/AllJobsCompleted`, `terminalState: Completed`, `{succeeded}` | `Complete`/`SUCCEEDED`, `endTime`, `succeeded`+1 |
//! | `failed(r)` | `C:Failed=True/r` (default `FailedJobs`), node `{failed:1}` | `C:Failed=True/r` (default `FailedJobs`), `terminalState: Failed` | `Failed`, reason `r` (default `AppFailed`: `jobStatus: FAILED`), `endTime`, `failed`+1 |
//! | `stopped` | error | error | `Complete`/`STOPPED`, `endTime` |
//! | `suspended` | `spec.suspend=true`, then `C:Suspended=True/Suspended`, node `{suspended:1}` | `spec.suspend=true`, then `C:Suspended=True/SuspendedJobs`, `{suspended}` | `spec.suspend=true`, then `Suspending`, then `Suspended` (ids, `jobStatus` reset) |
//! | `resumed` | `spec.suspend=false`, then `C:Suspended=False/Resumed` (only if it was True), node `{active:1}` | `spec.suspend=false`, then `C:Suspended=False/ResumeJobs`, `{active}` (in order: leader first with `C:StartupPolicyInProgress=True`) | `spec.suspend=false`, then `""`, then `Initializing`, new `startTime` |
//! | `created_suspended` (builder) | `spec.suspend=true`, no status, no pods | `spec.suspend=true`, `C:Suspended=True/SuspendedJobs`, `{suspended}`, no pods | `spec.suspend=true`, `Initializing`, `Suspending`, `Suspended`, no pods |
//! | `admitted` | `resumed`, the pods created, `running` | same | same |
//! | `pod_fails(c)` | the first pod's status as the kubelet writes it for `c` | same | same |
//! | other steps | error | error | error |
//!
//! Pods are left alone by `suspended`/`resumed` (real controllers delete and recreate them),
//! and a restart restarts the first pod's container in place for every flavour (JobSet and
//! KubeRay recreate the pods instead). A pod [`JobDriver::pod_fails`] terminated (`OOMKilled`)
//! keeps its status when a later step finishes the pods, as a dead container stays dead.
//!
//! Kueue's side of a job it manages (its `Workload`: queued, admitted, preempted, requeued)
//! is played by [`crate::kueue`], which suspends and admits the job through these steps.

mod batch;
mod builder;
pub(crate) mod conditions;
mod driver;
pub mod jobset;
mod kubeflow;
mod play;
mod pod_failure;
mod pods;
pub mod rayjob;
mod spec;
mod steps;
pub mod trainjob;
mod volcano;

use crate::sim::Gvr;

pub use builder::JobBuilder;
pub use driver::{JobDriver, Pace};
pub use pod_failure::PodFailure;
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
    /// Kubeflow Trainer v2 `trainer.kubeflow.org/v1alpha1 TrainJob` (runs as a JobSet).
    TrainJob,
    /// `jobset.x-k8s.io/v1alpha2 JobSet`.
    JobSet,
    /// KubeRay `ray.io/v1 RayJob`.
    RayJob,
}

impl Flavor {
    /// The original four flavours, which code that builds default configs iterates (the
    /// daemon's built-in kinds); [`Flavor::AI_KINDS`] are not among them.
    pub const ALL: [Flavor; 4] = [Flavor::Batch, Flavor::Volcano, Flavor::PyTorch, Flavor::Mpi];

    /// The AI job kinds with condition- or enum-based status and no phase: Trainer v2,
    /// JobSet and KubeRay.
    pub const AI_KINDS: [Flavor; 3] = [Flavor::TrainJob, Flavor::JobSet, Flavor::RayJob];

    /// The resource the jobs live in.
    pub fn gvr(self) -> Gvr {
        match self {
            Flavor::Batch => Gvr::BATCH_JOB,
            Flavor::Volcano => Gvr::VOLCANO_JOB,
            Flavor::PyTorch => Gvr::PYTORCH_JOB,
            Flavor::Mpi => Gvr::MPI_JOB_V2,
            Flavor::TrainJob => Gvr::TRAIN_JOB,
            Flavor::JobSet => Gvr::JOBSET,
            Flavor::RayJob => Gvr::RAY_JOB,
        }
    }

    /// The job `kind`.
    pub fn kind(self) -> &'static str {
        match self {
            Flavor::Batch | Flavor::Volcano => "Job",
            Flavor::PyTorch => "PyTorchJob",
            Flavor::Mpi => "MPIJob",
            Flavor::TrainJob => "TrainJob",
            Flavor::JobSet => "JobSet",
            Flavor::RayJob => "RayJob",
        }
    }

    /// The label that names the job on its pods.
    pub fn pod_label(self) -> &'static str {
        match self {
            Flavor::Batch => "batch.kubernetes.io/job-name",
            Flavor::Volcano => "volcano.sh/job-name",
            Flavor::PyTorch | Flavor::Mpi => "training.kubeflow.org/job-name",
            // A TrainJob's JobSet has the TrainJob's name, so its pods carry it here too.
            Flavor::TrainJob | Flavor::JobSet => "jobset.sigs.k8s.io/jobset-name",
            Flavor::RayJob => "ray.io/originated-from-cr-name",
        }
    }

    /// One of [`Flavor::AI_KINDS`].
    pub fn is_ai_kind(self) -> bool {
        Flavor::AI_KINDS.contains(&self)
    }

    /// Whether the driver plays a job of this kind created suspended until Kueue admits it
    /// ([`JobBuilder::created_suspended`], [`JobDriver::admitted`]): the batch Job and the
    /// AI kinds.
    pub fn waits_for_admission(self) -> bool {
        self == Flavor::Batch || self.is_ai_kind()
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
