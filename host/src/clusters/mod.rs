//! Clusters: one supervisor task per kubeconfig file, each with its own cancellation, so adding,
//! changing or removing one file starts, restarts or stops that cluster only.

pub mod api_meter;
pub mod cleanup;
pub mod credentials;
pub mod finalizer;
pub mod health;
pub mod manager;
pub mod supervisor;
