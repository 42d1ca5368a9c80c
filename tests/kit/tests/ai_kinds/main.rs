//! The AI job kinds — Kubeflow Trainer `TrainJob`, `JobSet`, KubeRay `RayJob` — driven
//! against the simulator and read back over HTTP with the real kube client: discovery serves
//! them like the other CRDs, and every step's writes arrive in order with the status shapes
//! their controllers write (conditions, child-Job counts, deployment enums, times).

mod common;
mod discovery;
mod jobset;
mod rayjob;
mod trainjob;
