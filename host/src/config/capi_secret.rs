//! A Cluster API kubeconfig Secret made a cluster source.
//!
//! Cluster API keeps, in each Cluster's namespace, a Secret `<cluster>-kubeconfig` of type
//! `cluster.x-k8s.io/secret`, labelled `cluster.x-k8s.io/cluster-name: <cluster>`, whose key
//! `value` holds a whole kubeconfig (kubernetes-sigs/cluster-api, util/secret/consts.go). The
//! cluster is named by that label; the kubeconfig is judged as a file in `clusters_dir` is
//! ([`ClusterSource::from_kubeconfig`]): its current context (the only one when none is
//! named) is used, and one without a server, with a context that is not there or with CA data
//! that is not base64 is refused. A change of `value` (a new hash) restarts the cluster; a
//! change of only the labels or annotations does not.
//!
//! The same label is on Cluster API's other Secrets of the cluster (`<cluster>-ca`,
//! `<cluster>-etcd`, `<cluster>-sa`, `<cluster>-proxy`, and `<cluster>-user-kubeconfig` of
//! some providers): a Secret whose name is not `<label value>-kubeconfig` is no cluster and
//! is passed over without a word.
//!
//! Errors name the Secret's field, never a value of the kubeconfig: the YAML parser's own
//! message may quote the value it could not take, so only its place is said.

use std::collections::BTreeMap;

use kube::config::Kubeconfig;

use super::ConfigError;
use super::files::sha256_hex;
use super::inventory::origin;
use super::sources::ClusterSource;

/// The label Cluster API gives the Secrets of a cluster: the cluster's name.
pub const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";

/// The type of Cluster API's Secrets.
pub const SECRET_TYPE: &str = "cluster.x-k8s.io/secret";

/// Why a kubeconfig Secret is not a cluster; the message names the field at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CapiSecretError {
    #[error("type: `{0}`, not `cluster.x-k8s.io/secret` (Cluster API's kubeconfig Secrets')")]
    Type(String),
    #[error("labels: no cluster.x-k8s.io/cluster-name (the cluster's name)")]
    NoName,
    #[error(
        "labels.cluster.x-k8s.io/cluster-name: `{0}` cannot name a cluster (1-63 characters of \
         a-z, 0-9, `-`, `_`: it is the cluster's name in events and metrics)"
    )]
    Name(String),
    #[error("data.value: missing")]
    Missing,
    #[error("data.value: not base64")]
    NotBase64,
    #[error("data.value: not UTF-8 text")]
    NotText,
    #[error("data.value: not a kubeconfig ({place})")]
    NotKubeconfig { place: String },
    #[error("data.value: {0}")]
    Kubeconfig(String),
}

/// Whether a Secret named `name` with these labels is a cluster's kubeconfig Secret: named
/// `<cluster>-kubeconfig`. A Secret named so without the label is one (and refused for it);
/// Cluster API's other Secrets are not.
pub fn is_kubeconfig_secret(name: &str, labels: &BTreeMap<String, String>) -> bool {
    match labels.get(CLUSTER_NAME_LABEL) {
        Some(cluster) => name.strip_suffix("-kubeconfig") == Some(cluster.as_str()),
        None => name.ends_with("-kubeconfig"),
    }
}

/// The cluster a Cluster API kubeconfig Secret describes. `key` is the Secret's
/// `namespace/name`, `labels` and `secret_type` its own, `data` its `data` as the API returns
/// it (values base64).
pub fn parse(
    key: &str,
    labels: &BTreeMap<String, String>,
    secret_type: Option<&str>,
    data: &serde_json::Map<String, serde_json::Value>,
) -> Result<ClusterSource, CapiSecretError> {
    use base64::Engine as _;
    let secret_type = secret_type.unwrap_or("Opaque");
    if secret_type != SECRET_TYPE {
        return Err(CapiSecretError::Type(secret_type.to_string()));
    }
    let name = labels
        .get(CLUSTER_NAME_LABEL)
        .ok_or(CapiSecretError::NoName)?;
    if super::sources::validate_cluster_name(name).is_err() {
        return Err(CapiSecretError::Name(name.clone()));
    }
    let encoded = data
        .get("value")
        .and_then(|v| v.as_str())
        .ok_or(CapiSecretError::Missing)?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .map_err(|_| CapiSecretError::NotBase64)?;
    let text = String::from_utf8(bytes).map_err(|_| CapiSecretError::NotText)?;
    let kubeconfig = read_kubeconfig(&text)?;
    ClusterSource::from_kubeconfig(name, origin(key), sha256_hex(text.as_bytes()), kubeconfig)
        .map_err(|e| match e {
            ConfigError::Invalid(why) => CapiSecretError::Kubeconfig(why),
            other => CapiSecretError::Kubeconfig(other.to_string()),
        })
}

/// The kubeconfig of `value`; an error says where it breaks, not what it found there.
fn read_kubeconfig(text: &str) -> Result<Kubeconfig, CapiSecretError> {
    let de = serde_yaml_ng::Deserializer::from_str(text);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let mut place = match e.inner().location() {
            Some(at) => format!("line {}, column {}", at.line(), at.column()),
            None => "not YAML".to_string(),
        };
        if path != "." {
            place = format!("`{path}`, {place}");
        }
        CapiSecretError::NotKubeconfig { place }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;
    use serde_json::json;

    fn b64(text: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(text)
    }

    fn labels(cluster: &str) -> BTreeMap<String, String> {
        BTreeMap::from([(CLUSTER_NAME_LABEL.to_string(), cluster.to_string())])
    }

    fn data(value: &str) -> serde_json::Map<String, serde_json::Value> {
        let mut map = serde_json::Map::new();
        map.insert("value".into(), json!(b64(value)));
        map
    }

    fn kubeconfig(server: &str, ca: &str, token: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: prod\n  cluster:\n    server: \
             {server}\n{ca}users:\n- name: prod-admin\n  user:\n    token: {token}\n\
             contexts:\n- name: prod-admin@prod\n  context:\n    cluster: prod\n    user: \
             prod-admin\ncurrent-context: prod-admin@prod\n"
        )
    }

    fn parsed(cluster: &str, value: &str) -> Result<ClusterSource, CapiSecretError> {
        parse(
            "fleet/prod-kubeconfig",
            &labels(cluster),
            Some(SECRET_TYPE),
            &data(value),
        )
    }

    #[test]
    fn the_value_is_the_clusters_kubeconfig_named_by_the_label() {
        let value = kubeconfig("https://10.0.0.1:6443", "", "secret-token-1");
        let source = parsed("prod", &value).expect("a cluster");
        assert_eq!(source.name, "prod");
        assert_eq!(
            source.path,
            std::path::PathBuf::from("secret fleet/prod-kubeconfig")
        );
        assert_eq!(source.sha256, sha256_hex(value.as_bytes()));
        assert_eq!(
            source.kubeconfig.current_context.as_deref(),
            Some("prod-admin@prod")
        );
        let rotated = parsed(
            "prod",
            &kubeconfig("https://10.0.0.1:6443", "", "secret-token-2"),
        )
        .expect("a cluster");
        assert_ne!(rotated.sha256, source.sha256, "a new token is a change");
    }

    #[test]
    fn only_the_clusters_kubeconfig_secret_is_a_cluster() {
        assert!(is_kubeconfig_secret("prod-kubeconfig", &labels("prod")));
        for other in ["prod-ca", "prod-etcd", "prod-sa", "prod-user-kubeconfig"] {
            assert!(!is_kubeconfig_secret(other, &labels("prod")), "{other}");
        }
        assert!(is_kubeconfig_secret("prod-kubeconfig", &BTreeMap::new()));
        assert!(!is_kubeconfig_secret("prod-ca", &BTreeMap::new()));
    }

    #[test]
    fn a_secret_that_is_no_cluster_is_refused_naming_the_field_never_a_value() {
        let good = kubeconfig("https://10.0.0.1:6443", "", "leaky-token-9");
        let cases: Vec<(Result<ClusterSource, CapiSecretError>, &str)> = vec![
            (
                parse(
                    "fleet/prod-kubeconfig",
                    &labels("prod"),
                    Some("Opaque"),
                    &data(&good),
                ),
                "type: `Opaque`",
            ),
            (
                parse(
                    "fleet/prod-kubeconfig",
                    &BTreeMap::new(),
                    Some(SECRET_TYPE),
                    &data(&good),
                ),
                "labels: no cluster.x-k8s.io/cluster-name",
            ),
            (
                parsed("Prod.eu", &good),
                "labels.cluster.x-k8s.io/cluster-name: `Prod.eu`",
            ),
            (
                parse(
                    "fleet/prod-kubeconfig",
                    &labels("prod"),
                    Some(SECRET_TYPE),
                    &serde_json::Map::new(),
                ),
                "data.value: missing",
            ),
            (
                parsed("prod", "users: leaky-token-9\n"),
                "data.value: not a kubeconfig (`users`",
            ),
            (
                parsed("prod", "clusters: [\n  leaky-token-9"),
                "data.value: not a kubeconfig (",
            ),
            (
                parsed("prod", &kubeconfig("''", "", "leaky-token-9")),
                "data.value: kubeconfig: cluster `prod` has no `server`",
            ),
            (
                parsed(
                    "prod",
                    &good.replace("current-context: prod-admin@prod", "current-context: gone"),
                ),
                "data.value: kubeconfig:",
            ),
            (
                parsed(
                    "prod",
                    &kubeconfig(
                        "https://10.0.0.1:6443",
                        "    certificate-authority-data: '%%%leaky-token-9'\n",
                        "t",
                    ),
                ),
                "data.value: kubeconfig:",
            ),
        ];
        for (result, expected) in cases {
            let why = result.expect_err(expected).to_string();
            assert!(why.starts_with(expected), "{why:?} is not {expected:?}");
            assert!(!why.contains("leaky-token-9"), "{why}");
        }
        let mut not_base64 = serde_json::Map::new();
        not_base64.insert("value".into(), json!("%%%"));
        let why = parse(
            "fleet/prod-kubeconfig",
            &labels("prod"),
            Some(SECRET_TYPE),
            &not_base64,
        )
        .expect_err("not base64");
        assert_eq!(why, CapiSecretError::NotBase64);
    }
}
