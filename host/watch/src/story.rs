//! A job's story: what the objects around a job say about it — its Kueue `Workload` (queued,
//! admitted, evicted, preempted, requeued, and the quota it holds) and its pods (why a
//! container failed). A job's own status says it is pending or failed; these objects say why.
//!
//! Each part here reads one object into facts and is pure: no client, no clock, no state.
//! Joining the facts to their job (by owner reference and Kueue's `kueue.x-k8s.io/job-uid`
//! label, whichever object comes first) is the next layer's work; the reading is apart so that
//! each fact is tested against the objects Kueue and the kubelet write.
//!
//! - [`workload`]: a Workload's state in the queue, its cluster queue, when it started to
//!   wait (as Kueue computes it), its evictions, preemptions and requeues, and the accelerators
//!   its admission holds.
//! - [`pod_cause`]: the first failing container of a pod and why: `OOMKilled` and its exit
//!   code, `ImagePullBackOff`, `CrashLoopBackOff`, or the pod's own reason (an eviction).

pub mod pod_cause;
pub mod workload;
