//! Test kit for jobrelay: a Kubernetes API simulator that speaks the real HTTP protocol, the
//! kubeconfig files that point clients at it, and drivers that move training jobs through
//! realistic lifecycles.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use jobrelay_testkit::{Flavor, JobDriver, SimCluster};
//! let sim = SimCluster::start("east").await?;
//! sim.write_kubeconfig("/tmp/clusters/east.yaml")?;
//! let mut job = JobDriver::create(&sim, Flavor::PyTorch, "ml", "train")?;
//! job.running()?;
//! job.succeeded()?;
//! # Ok(()) }
//! ```

pub mod configmap;
pub mod kubeconfig;
pub mod lifecycle;
pub mod sim;

pub use kubeconfig::{KubeconfigSpec, render as render_kubeconfig, write_atomic};
pub use lifecycle::{Flavor, JobBuilder, JobDriver};
pub use sim::{
    EventType, FieldSelector, Gvr, LabelSelector, PatchKind, RequestRecord, ResourceKind,
    SimCluster, SimError, SimOptions,
};
