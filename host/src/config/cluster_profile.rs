//! A SIG-Multicluster ClusterProfile (`multicluster.x-k8s.io/v1alpha1`) made a cluster
//! source, with the consumer's access-provider file ([`crate::config::access_providers`]).
//!
//! The cluster is named by the profile's `metadata.name` (what the cluster manager gives it
//! in the namespace; `spec.displayName` and `spec.clusterManager` are not used for it). Of
//! `status.accessProviders[]` (and of the deprecated `status.credentialProviders[]` when the
//! first has none the file knows), the first entry whose `name` the file has is taken: its
//! `cluster` (kubeconfig's Cluster shape: `server`, `certificate-authority-data`,
//! `insecure-skip-tls-verify`, `proxy-url`, `tls-server-name`) gives the server and CA, and
//! the file's exec plugin the credential. Together they are one kubeconfig — one cluster, one
//! exec user, one context — judged as a file in `clusters_dir` is
//! ([`ClusterSource::from_kubeconfig`]); with `provideClusterInfo` kube-rs hands the plugin
//! that cluster in `KUBERNETES_EXEC_INFO`. Its hash is that kubeconfig's: a new server, CA or
//! plugin restarts the cluster, a change of the profile's labels, spec or conditions does not.
//! Its `ControlPlaneHealthy` condition is read apart ([`readiness`]): `False` feeds the
//! cluster's availability (degraded while it answers, offline at the first failed check).
//!
//! Errors name the profile's field, never a value from it or from the plugin's env.

use serde_json::{Value, json};

use super::ConfigError;
use super::access_providers::{AccessProviders, ProviderExec};
use super::files::sha256_hex;
use super::inventory::{Readiness, clipped};
use super::sources::ClusterSource;
use jobrelay_fleet::availability::Source;

/// The API group of ClusterProfiles.
pub const GROUP: &str = "multicluster.x-k8s.io";

/// The version read.
pub const VERSION: &str = "v1alpha1";

/// Why a ClusterProfile is not a cluster; the message names the field at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProfileError {
    #[error(
        "metadata.name: `{0}` cannot name a cluster (1-63 characters of a-z, 0-9, `-`, `_`: \
         it is the cluster's name in events and metrics)"
    )]
    Name(String),
    #[error("status.accessProviders: none (the cluster manager has not said how it is reached)")]
    NoProviders,
    #[error(
        "status.accessProviders: none of [{offered}] is a provider of the access-provider file \
         (it has [{known}])"
    )]
    Unknown { offered: String, known: String },
    #[error("status.accessProviders[name={0}].cluster: missing")]
    NoCluster(String),
    #[error("status.accessProviders[name={provider}].cluster: not a kubeconfig cluster (`{at}`)")]
    Cluster { provider: String, at: String },
    #[error("status.accessProviders[name={0}].cluster.server: missing")]
    NoServer(String),
    #[error("status.accessProviders[name={provider}].cluster: {why}")]
    Kubeconfig { provider: String, why: String },
}

/// Where a cluster from a ClusterProfile came from, as the log's `file=` and `check` say it.
pub fn origin(key: &str) -> std::path::PathBuf {
    std::path::PathBuf::from(format!("clusterprofile {key}"))
}

/// The cluster the ClusterProfile `key` (`namespace/name`) describes; `object` is the whole
/// object as the API serves it.
pub fn parse(
    key: &str,
    name: &str,
    object: &Value,
    providers: &AccessProviders,
) -> Result<ClusterSource, ProfileError> {
    if super::sources::validate_cluster_name(name).is_err() {
        return Err(ProfileError::Name(name.to_string()));
    }
    let status = &object["status"];
    let entries: Vec<&Value> = ["accessProviders", "credentialProviders"]
        .iter()
        .flat_map(|field| status[*field].as_array().into_iter().flatten())
        .collect();
    if entries.is_empty() {
        return Err(ProfileError::NoProviders);
    }
    let Some((provider, exec, entry)) = entries.iter().find_map(|entry| {
        let provider = entry["name"].as_str()?;
        providers.get(provider).map(|exec| (provider, exec, *entry))
    }) else {
        let offered: Vec<&str> = entries.iter().filter_map(|e| e["name"].as_str()).collect();
        let known: Vec<&str> = providers.keys().map(String::as_str).collect();
        return Err(ProfileError::Unknown {
            offered: offered.join(", "),
            known: known.join(", "),
        });
    };
    let raw = entry
        .get("cluster")
        .filter(|c| !c.is_null())
        .ok_or_else(|| ProfileError::NoCluster(provider.to_string()))?;
    let cluster: kube::config::Cluster =
        serde_path_to_error::deserialize(raw).map_err(|e| ProfileError::Cluster {
            provider: provider.to_string(),
            at: e.path().to_string(),
        })?;
    if cluster
        .server
        .as_deref()
        .is_none_or(|s| s.trim().is_empty())
    {
        return Err(ProfileError::NoServer(provider.to_string()));
    }
    let text = kubeconfig_text(name, provider, &cluster, exec);
    let kubeconfig: kube::config::Kubeconfig =
        serde_json::from_str(&text).map_err(|e| ProfileError::Kubeconfig {
            provider: provider.to_string(),
            why: format!("cannot be used ({})", e.classify_name()),
        })?;
    ClusterSource::from_kubeconfig(name, origin(key), sha256_hex(text.as_bytes()), kubeconfig)
        .map_err(|e| ProfileError::Kubeconfig {
            provider: provider.to_string(),
            why: match e {
                ConfigError::Invalid(why) => why,
                other => other.to_string(),
            },
        })
}

/// The condition in which the cluster manager reports the control plane's health.
pub const CONTROL_PLANE_HEALTHY: &str = "ControlPlaneHealthy";

/// What the profile `key` says against its cluster's control plane: unhealthy while its
/// `ControlPlaneHealthy` condition is `False`. `True`, `Unknown` or no such condition say
/// nothing against it (a manager that does not report health must not make its clusters
/// look down).
pub fn readiness(key: &str, object: &Value) -> Option<Readiness> {
    let condition = object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == CONTROL_PLANE_HEALTHY)?;
    if condition["status"] != "False" {
        return None;
    }
    let text = |field: &str| condition[field].as_str().filter(|t| !t.is_empty());
    let mut detail = format!("ClusterProfile {key}: {CONTROL_PLANE_HEALTHY} is False");
    if let Some(reason) = text("reason") {
        detail.push_str(&format!(" ({})", clipped(reason)));
    }
    if let Some(message) = text("message") {
        detail.push_str(&format!(": {}", clipped(message)));
    }
    Some(Readiness {
        state: Source::Unhealthy,
        detail,
    })
}

/// The kubeconfig of the profile's cluster and the provider's exec plugin, as JSON text.
fn kubeconfig_text(
    name: &str,
    provider: &str,
    cluster: &kube::config::Cluster,
    exec: &ProviderExec,
) -> String {
    let env: Vec<Value> = exec
        .env
        .iter()
        .map(|(k, v)| json!({ "name": k, "value": v }))
        .collect();
    json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{ "name": name, "cluster": cluster }],
        "users": [{ "name": provider, "user": { "exec": {
            "apiVersion": exec.api_version,
            "command": exec.command,
            "args": exec.args,
            "env": env,
            "provideClusterInfo": exec.provide_cluster_info,
            "interactiveMode": exec.interactive_mode,
        } } }],
        "contexts": [{ "name": name, "context": { "cluster": name, "user": provider } }],
        "current-context": name,
    })
    .to_string()
}

/// serde_json's error kind, without the text it could not take.
trait Classify {
    fn classify_name(&self) -> &'static str;
}

impl Classify for serde_json::Error {
    fn classify_name(&self) -> &'static str {
        match self.classify() {
            serde_json::error::Category::Io => "io",
            serde_json::error::Category::Syntax => "syntax",
            serde_json::error::Category::Data => "data",
            serde_json::error::Category::Eof => "eof",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::access_providers;

    fn providers() -> AccessProviders {
        access_providers::parse(
            "p.yaml",
            "providers:\n- name: token\n  execConfig:\n    command: /bin/t\n    env: \
             [{name: K, value: leaky-env-secret}]\n    provideClusterInfo: true\n",
        )
        .expect("providers")
    }

    fn profile(access: Value) -> Value {
        json!({
            "metadata": { "name": "prod", "namespace": "inv" },
            "spec": { "displayName": "Prod EU", "clusterManager": { "name": "ocm" } },
            "status": { "accessProviders": access },
        })
    }

    /// Only a `False` ControlPlaneHealthy says the control plane is unhealthy, in the
    /// manager's words; any other status, or none, says nothing against it.
    #[test]
    fn a_false_control_plane_healthy_condition_is_an_unhealthy_control_plane() {
        let with = |conditions: Value| {
            let mut object = profile(json!([]));
            object["status"]["conditions"] = conditions;
            readiness("inv/prod", &object)
        };
        let unhealthy = with(json!([
            { "type": "Joined", "status": "False" },
            { "type": "ControlPlaneHealthy", "status": "False", "reason": "ApiServerDown",
              "message": "2 of 3 control plane nodes are not ready" },
        ]))
        .expect("unhealthy");
        assert_eq!(unhealthy.state, Source::Unhealthy);
        assert_eq!(
            unhealthy.detail,
            "ClusterProfile inv/prod: ControlPlaneHealthy is False (ApiServerDown): 2 of 3 \
             control plane nodes are not ready"
        );
        for status in ["True", "Unknown", ""] {
            let said = with(json!([{ "type": "ControlPlaneHealthy", "status": status }]));
            assert_eq!(said, None, "{status}");
        }
        assert_eq!(with(json!([{ "type": "Joined", "status": "False" }])), None);
        assert_eq!(with(json!("not a list")), None);
        assert_eq!(readiness("inv/prod", &profile(json!([]))), None);
        let long = with(json!([{ "type": "ControlPlaneHealthy", "status": "False",
                                 "message": "x".repeat(5000) }]))
        .expect("unhealthy");
        assert!(long.detail.len() < 300, "{}", long.detail.len());
    }

    #[test]
    fn the_known_provider_gives_server_and_ca_and_the_file_the_exec_plugin() {
        let object = profile(json!([
            { "name": "other", "cluster": { "server": "https://wrong" } },
            { "name": "token", "cluster": {
                "server": "https://10.0.0.1:6443", "insecure-skip-tls-verify": true } },
        ]));
        let source = parse("inv/prod", "prod", &object, &providers()).expect("a cluster");
        assert_eq!(source.name, "prod");
        assert_eq!(
            source.path,
            std::path::PathBuf::from("clusterprofile inv/prod")
        );
        let kc = &source.kubeconfig;
        let cluster = kc.clusters[0].cluster.as_ref().expect("cluster");
        assert_eq!(cluster.server.as_deref(), Some("https://10.0.0.1:6443"));
        let exec = kc.auth_infos[0]
            .auth_info
            .as_ref()
            .and_then(|a| a.exec.as_ref())
            .expect("exec");
        assert_eq!(exec.command.as_deref(), Some("/bin/t"));
        assert!(exec.provide_cluster_info);
        let moved =
            profile(json!([{ "name": "token", "cluster": { "server": "https://10.0.0.2" } }]));
        let again = parse("inv/prod", "prod", &moved, &providers()).expect("a cluster");
        assert_ne!(again.sha256, source.sha256, "a new server is a change");
    }

    #[test]
    fn a_profile_that_is_no_cluster_is_refused_naming_the_field() {
        let cases = [
            (
                parse("inv/P.x", "P.x", &profile(json!([])), &providers()),
                "metadata.name: `P.x`",
            ),
            (
                parse("inv/prod", "prod", &json!({}), &providers()),
                "status.accessProviders: none",
            ),
            (
                parse(
                    "inv/prod",
                    "prod",
                    &profile(json!([{ "name": "gke" }])),
                    &providers(),
                ),
                "status.accessProviders: none of [gke] is a provider of the access-provider file (it has [token])",
            ),
            (
                parse(
                    "inv/prod",
                    "prod",
                    &profile(json!([{ "name": "token" }])),
                    &providers(),
                ),
                "status.accessProviders[name=token].cluster: missing",
            ),
            (
                parse(
                    "inv/prod",
                    "prod",
                    &profile(json!([{ "name": "token", "cluster": {} }])),
                    &providers(),
                ),
                "status.accessProviders[name=token].cluster.server: missing",
            ),
            (
                parse(
                    "inv/prod",
                    "prod",
                    &profile(json!([{ "name": "token", "cluster": { "server": 3 } }])),
                    &providers(),
                ),
                "status.accessProviders[name=token].cluster: not a kubeconfig cluster (`server`)",
            ),
            (
                parse(
                    "inv/prod",
                    "prod",
                    &profile(json!([{ "name": "token", "cluster": {
                    "server": "https://x", "certificate-authority-data": "%%%leaky" } }])),
                    &providers(),
                ),
                "status.accessProviders[name=token].cluster: kubeconfig:",
            ),
        ];
        for (result, expected) in cases {
            let why = result.expect_err(expected).to_string();
            assert!(why.starts_with(expected), "{why:?} is not {expected:?}");
            assert!(!why.contains("leaky"), "{why}");
        }
    }
}
