//! A job's story: what the objects around a job say about it — its Kueue `Workload` (queued,
//! admitted, evicted, preempted, requeued, and the quota it holds) and its pods (why a
//! container failed). A job's own status says it is pending or failed; these objects say why.
//!
//! Each part here is pure: no client, no clock. The readers turn one object into facts, tested
//! against the objects Kueue and the kubelet write; the book joins the facts to their job (by
//! Kueue's `kueue.x-k8s.io/job-uid` label or the owner references), whichever object comes
//! first; the sources watch Workloads and pods into the book, and the job streams take its
//! snapshot onto each event of a kind that tells its story.
//!
//! - [`workload`]: a Workload's state in the queue, its cluster queue, when it started to
//!   wait (as Kueue computes it), its evictions, preemptions and requeues, and the accelerators
//!   its admission holds.
//! - [`book`]: the stories of one cluster's jobs, each object's facts joined to its job by uid
//!   in whatever order they come, bounded (a pure state machine).
//! - [`sources`]: the Workload and pod watches of one cluster, and [`sources::Stories`], the
//!   book they share with the job streams.
//! - [`queue_phase`]: the phases the Workload says and the job's status cannot — `queued`
//!   and `preempted` — with when each began, for the job's event and its transition key.
//! - [`rereads`]: a job stream's reads of the jobs whose story a Workload changed alone into
//!   a stay of Kueue's queue, so that stay reaches plugins as an event of its own.
//! - [`pod_cause`]: the first failing container of a pod and why: `OOMKilled` and its exit
//!   code, `ImagePullBackOff`, `CrashLoopBackOff`, or the pod's own reason (an eviction).

pub mod book;
pub mod pod_cause;
pub mod queue_phase;
pub mod rereads;
pub mod sources;
pub mod workload;
