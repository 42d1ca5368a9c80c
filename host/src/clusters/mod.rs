//! Clusters: one supervisor task per kubeconfig file (or cluster source object), each with its
//! own cancellation, so adding, changing or removing one file starts, restarts or stops that
//! cluster only; and the watch of the cluster sources on the home cluster
//! ([`inventory_watch`]), with Cluster API's Clusters beside their Secrets
//! ([`control_plane_watch`]).

pub mod api_meter;
pub mod cleanup;
pub mod control_plane_watch;
pub mod credentials;
pub mod finalizer;
pub mod health;
pub mod inventory_watch;
pub mod manager;
pub mod supervisor;
