//! Test kit for jobrelay: a Kubernetes API simulator that speaks the real HTTP protocol, the
//! kubeconfig files that point clients at it, and drivers that move training jobs through
//! realistic lifecycles (with Kueue's part in them: [`SimKueue`]); and a stand-in for Feishu's
//! custom-bot webhook ([`FeishuReceiver`]) for notifier plugins.
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

pub mod argocd;
pub mod capi;
pub mod chat;
pub mod cluster_profile;
pub mod configmap;
pub mod feishu;
pub mod kubeconfig;
pub mod kueue;
pub mod lifecycle;
pub mod mariadb;
pub mod registry;
pub mod scenario;
mod serve;
pub mod sim;

pub use chat::{ChatReceiver, Provider, Received};
pub use feishu::{FeishuReceiver, ReceivedMessage};
pub use kubeconfig::{KubeconfigSpec, render as render_kubeconfig, write_atomic};
pub use kueue::{KueueStep, SimKueue, Workload};
pub use lifecycle::{Flavor, JobBuilder, JobDriver, Pace, PodFailure};
pub use mariadb::PrivateMariaDb;
pub use registry::LocalRegistry;
pub use scenario::Scenario;
pub use sim::{
    DeletionRecord, EventType, FieldSelector, Gvr, LabelSelector, PatchKind, RequestRecord,
    ResourceKind, SimCluster, SimError, SimOptions,
};
