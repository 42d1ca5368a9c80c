//! The job's own pods: listed by the kind's pod label, kept only if the job's uid owns them,
//! and described as the plugin sees them; and the API server's errors as pod-logs errors.
//!
//! Apart because this is the rule that decides which pods a plugin may read: the label alone
//! would also match a deleted and re-created job of the same name.

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;

use super::JobScope;
use jobrelay_bindings::jobrelay::plugin::pod_logs::{Container, Error as LogError, Pod as WitPod};

pub(super) async fn list_pods(scope: &JobScope) -> Result<Vec<WitPod>, LogError> {
    let api: Api<Pod> = Api::namespaced(scope.client.clone(), &scope.namespace);
    let params = ListParams::default().labels(&format!("{}={}", scope.label, scope.name));
    let list = api
        .list(&params)
        .await
        .map_err(|e| unavailable("list pods", e))?;
    let mut pods: Vec<WitPod> = list
        .items
        .into_iter()
        .filter(|pod| {
            pod.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|owner| owner.uid == scope.uid)
        })
        .map(describe)
        .collect();
    pods.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(pods)
}

/// The WIT view of a pod: its containers (init containers first) with restart counts.
fn describe(pod: Pod) -> WitPod {
    let spec = pod.spec.unwrap_or_default();
    let status = pod.status.unwrap_or_default();
    let restarts = |statuses: &Option<Vec<k8s_openapi::api::core::v1::ContainerStatus>>,
                    name: &str| {
        statuses
            .iter()
            .flatten()
            .find(|s| s.name == name)
            .map_or(0, |s| u32::try_from(s.restart_count).unwrap_or(0))
    };
    let mut containers = Vec::new();
    for container in spec.init_containers.iter().flatten() {
        containers.push(Container {
            restart_count: restarts(&status.init_container_statuses, &container.name),
            name: container.name.clone(),
            init: true,
        });
    }
    for container in &spec.containers {
        containers.push(Container {
            restart_count: restarts(&status.container_statuses, &container.name),
            name: container.name.clone(),
            init: false,
        });
    }
    WitPod {
        name: pod.metadata.name.unwrap_or_default(),
        phase: status.phase.unwrap_or_else(|| "Unknown".into()),
        node: spec.node_name,
        containers,
    }
}

pub(super) fn unavailable(what: &str, error: kube::Error) -> LogError {
    match &error {
        kube::Error::Api(status) if status.code == 404 => {
            LogError::NotFound(format!("{what}: {}", status.message))
        }
        // The API server answers 400 for a container that has no previous instance, or that
        // has not started yet.
        kube::Error::Api(status) if status.code == 400 => {
            LogError::NotFound(format!("{what}: {}", status.message))
        }
        _ => LogError::Unavailable(format!("{what}: {}", crate::open_error::chain(&error))),
    }
}
