//! SIG-Multicluster ClusterProfiles (`multicluster.x-k8s.io/v1alpha1`) for simulated
//! clusters, and an exec plugin that gives their credential: what a cluster manager (OCM, GKE
//! Fleet) writes on the hub — a profile per cluster whose `status.accessProviders[]` says how
//! it is reached (a provider's name, the cluster's server and CA) — and what the consumer
//! keeps apart (the access-provider file naming the plugin). A test puts a simulated cluster
//! into that inventory on another simulated cluster, the home cluster, moves or deletes it
//! there as the manager would.
//!
//! The ClusterProfile is a custom resource: [`register`] makes the home simulator serve it,
//! with `status` a subresource as the CRD has it (so [`put`] writes the status apart).

use std::path::Path;

use serde_json::{Value, json};

use crate::sim::{Gvr, ResourceKind, SimCluster, SimError};

/// The resource ClusterProfiles are served as.
pub const GVR: Gvr = Gvr::CLUSTER_PROFILE;

/// Makes `home` serve ClusterProfiles, as installing the CRD does.
pub fn register(home: &SimCluster) {
    home.register_kind(ResourceKind::new(
        "multicluster.x-k8s.io",
        "v1alpha1",
        "ClusterProfile",
        "clusterprofiles",
        true,
    ));
}

/// A ClusterProfile `namespace/name` whose status offers `access` (entries `{name, cluster}`).
pub fn profile(namespace: &str, name: &str, access: Value) -> Value {
    json!({
        "apiVersion": "multicluster.x-k8s.io/v1alpha1",
        "kind": "ClusterProfile",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": { "x-k8s.io/cluster-manager": "kit" },
        },
        "spec": { "displayName": name, "clusterManager": { "name": "kit" } },
        "status": {
            "accessProviders": access,
            "conditions": [{
                "type": "ControlPlaneHealthy", "status": "True", "reason": "Healthy",
                "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z",
            }],
        },
    })
}

/// An access-provider entry: `provider` reaches the cluster at `server`.
pub fn access(provider: &str, server: &str) -> Value {
    json!({ "name": provider, "cluster": { "server": server } })
}

/// Creates `object` (a ClusterProfile), or replaces the one of that name; its `status` is
/// written through the status subresource, as a cluster manager writes it.
pub fn put(home: &SimCluster, object: Value) -> Result<Value, SimError> {
    let namespace = object["metadata"]["namespace"].as_str().unwrap_or_default();
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    match home.get(&GVR, namespace, name) {
        Ok(current) => {
            let mut next = object.clone();
            next["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"].clone();
            home.replace(&GVR, next)?;
            home.update_status(&GVR, namespace, name, object["status"].clone())
        }
        Err(_) => home.create(&GVR, object),
    }
}

/// Creates or replaces the profile `namespace/name` of `target`, reached by `provider`.
pub fn put_cluster(
    home: &SimCluster,
    namespace: &str,
    name: &str,
    provider: &str,
    target: &SimCluster,
) -> Result<Value, SimError> {
    let object = profile(namespace, name, json!([access(provider, &target.url())]));
    put(home, object)
}

/// Writes an exec plugin to `path` (a shell script, made executable) that prints an
/// `ExecCredential` with `token`, and appends the server it was given to `calls` (one line a
/// run). With `need_cluster` it fails, printing nothing, unless `KUBERNETES_EXEC_INFO`
/// carries the cluster's `server` — what `provideClusterInfo: true` promises the plugin.
pub fn write_exec_plugin(
    path: &Path,
    token: &str,
    calls: &Path,
    need_cluster: bool,
) -> std::io::Result<()> {
    let need = if need_cluster { "1" } else { "0" };
    let script = format!(
        "#!/bin/sh\n\
         server=$(printf '%s' \"$KUBERNETES_EXEC_INFO\" | sed -n 's/.*\"server\":\"\\([^\"]*\\)\".*/\\1/p')\n\
         echo \"${{server:-none}}\" >> '{calls}'\n\
         if [ {need} = 1 ] && [ -z \"$server\" ]; then\n\
         \x20 echo 'no cluster in KUBERNETES_EXEC_INFO' >&2\n\
         \x20 exit 1\n\
         fi\n\
         printf '%s\\n' '{{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\"status\":{{\"token\":\"{token}\"}}}}'\n",
        calls = calls.display(),
    );
    std::fs::write(path, script)?;
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
}

/// The access-provider file's text (upstream's JSON shape) with one provider `name` running
/// `command`, `provideClusterInfo` as given.
pub fn provider_file(name: &str, command: &Path, provide_cluster_info: bool) -> String {
    json!({ "providers": [{
        "name": name,
        "execConfig": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": command,
            "provideClusterInfo": provide_cluster_info,
            "interactiveMode": "Never",
        },
    }] })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plugin is what makes the integration test able to fail: without the cluster in
    /// `KUBERNETES_EXEC_INFO` it prints no credential and exits non-zero.
    #[test]
    fn the_exec_plugin_needs_the_cluster_when_asked_to() {
        let dir = tempfile::tempdir().expect("tempdir");
        let plugin = dir.path().join("plugin.sh");
        let calls = dir.path().join("calls");
        write_exec_plugin(&plugin, "tok-1", &calls, true).expect("plugin");
        let run = |info: Option<&str>| {
            let mut cmd = std::process::Command::new(&plugin);
            cmd.env_remove("KUBERNETES_EXEC_INFO");
            if let Some(info) = info {
                cmd.env("KUBERNETES_EXEC_INFO", info);
            }
            cmd.output().expect("runs")
        };
        let refused = run(None);
        assert!(!refused.status.success());
        assert!(refused.stdout.is_empty());
        let info = r#"{"kind":"ExecCredential","spec":{"interactive":false,"cluster":{"server":"http://127.0.0.1:1"}}}"#;
        let given = run(Some(info));
        assert!(given.status.success());
        let credential: Value = serde_json::from_slice(&given.stdout).expect("json");
        assert_eq!(credential["status"]["token"], "tok-1");
        assert_eq!(
            std::fs::read_to_string(&calls).expect("calls"),
            "none\nhttp://127.0.0.1:1\n"
        );
    }
}
