//! Why a pod's job failed, as its container statuses say: the fact a job record most often
//! lacks (a failed event that says only "Failed" while the kubelet said `OOMKilled`, exit 137).
//!
//! The first failing container wins, init containers before the others: an init container
//! that fails keeps every other container from starting, so its cause is the pod's. A
//! container fails when it ended with a non-zero exit code, or waits for a reason that will
//! not pass by itself ([`STUCK_REASONS`]). A container restarting in a loop waits with
//! `CrashLoopBackOff`; its last termination (the exit code, and `OOMKilled` when the kernel
//! killed it) is what teams ask for, so it is kept beside the reason. Without a failing
//! container, the pod's own reason counts (`Evicted` by the kubelet under node pressure,
//! `DeadlineExceeded`).

use k8s_openapi::api::core::v1::{ContainerStatus, Pod};

pub use jobrelay_contract::story::FailureCause;

use jobrelay_contract::story::bounded;

/// Waiting reasons that mean the container cannot start until someone changes something.
pub const STUCK_REASONS: [&str; 7] = [
    "CrashLoopBackOff",
    "ImagePullBackOff",
    "ErrImagePull",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
];

/// The pod's failure cause, if it has one (see the module's rules).
pub fn failure_cause(pod: &Pod) -> Option<FailureCause> {
    let status = pod.status.as_ref()?;
    let init = status.init_container_statuses.iter().flatten();
    let main = status.container_statuses.iter().flatten();
    init.map(|s| (s, true))
        .chain(main.map(|s| (s, false)))
        .find_map(|(s, init)| container_cause(s, init))
        .or_else(|| {
            status.reason.as_ref().map(|reason| FailureCause {
                container: String::new(),
                init: false,
                reason: bounded(reason.clone()),
                exit_code: None,
                last_reason: None,
                message: status.message.clone().map(bounded),
            })
        })
}

/// One container's cause, if it failed.
fn container_cause(status: &ContainerStatus, init: bool) -> Option<FailureCause> {
    let state = status.state.as_ref()?;
    let cause = |reason: &str, exit_code, last_reason, message: &Option<String>| FailureCause {
        container: status.name.clone(),
        init,
        reason: bounded(reason.to_string()),
        exit_code,
        last_reason,
        message: message.clone().map(bounded),
    };
    if let Some(ended) = state.terminated.as_ref().filter(|t| t.exit_code != 0) {
        let reason = ended.reason.as_deref().unwrap_or("Error");
        return Some(cause(reason, Some(ended.exit_code), None, &ended.message));
    }
    let waiting = state.waiting.as_ref()?;
    let reason = waiting.reason.as_deref()?;
    if !STUCK_REASONS.contains(&reason) {
        return None;
    }
    let last = status
        .last_state
        .as_ref()
        .and_then(|s| s.terminated.as_ref());
    Some(cause(
        reason,
        last.map(|t| t.exit_code),
        last.and_then(|t| t.reason.clone()),
        &waiting.message,
    ))
}

#[cfg(test)]
mod tests;
