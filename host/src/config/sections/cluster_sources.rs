//! The `cluster_sources:` section: clusters read live from an inventory kept on the home
//! cluster, beside the kubeconfig files of `clusters_dir` (which stay the default and may be
//! used together with a source).
//!
//! Platform teams already keep their clusters' credentials in such an inventory; reading it
//! through the home cluster's API sees an edit at once, where a Secret mounted as a volume
//! lags the kubelet's sync by a minute or more. Three inventories are read: Argo CD's cluster
//! Secrets (`argocd:`), Cluster API's kubeconfig Secrets (`cluster_api:`) and SIG-Multicluster
//! ClusterProfiles with an access-provider file (`cluster_profile:`); the objects are watched
//! by [`crate::clusters::inventory_watch`] and each is made a cluster by
//! [`crate::config::argocd_secret`], [`crate::config::capi_secret`] or
//! [`crate::config::cluster_profile`].
//!
//! ```yaml
//! cluster_sources:
//!   argocd: {}            # namespace argocd, label argocd.argoproj.io/secret-type=cluster
//!   cluster_api:
//!     namespace: fleet    # required: Cluster API keeps them in each Cluster's namespace
//!   cluster_profile:
//!     namespace: fleet-inventory          # required
//!     access_providers: providers.json    # required: the consumer's provider file
//! ```
//!
//! The section is read live: an edit restarts the source's watch (the clusters it gives stay
//! until the new watch has listed the Secrets); removing it removes its clusters.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::config::access_providers::{self, AccessProviders, AccessProvidersError};

/// The namespace Argo CD keeps its cluster Secrets in, unless it was installed elsewhere.
pub const ARGOCD_NAMESPACE: &str = "argocd";

/// The label Argo CD gives its cluster Secrets.
pub const ARGOCD_SELECTOR: &str = "argocd.argoproj.io/secret-type=cluster";

/// The label Cluster API gives its Secrets; the default selector is that it exists.
pub const CLUSTER_API_SELECTOR: &str = "cluster.x-k8s.io/cluster-name";

/// The `cluster_sources:` section as written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterSourcesSpec {
    /// The credentials the inventory is read with: a kubeconfig file of the home cluster,
    /// relative to the config folder. Absent: the pod's service account (in-cluster).
    #[serde(default)]
    pub kubeconfig: Option<PathBuf>,
    /// Argo CD's cluster Secrets. Absent: not read.
    #[serde(default)]
    pub argocd: Option<ArgoCdSpec>,
    /// Cluster API's kubeconfig Secrets. Absent: not read.
    #[serde(default)]
    pub cluster_api: Option<ClusterApiSpec>,
    /// SIG-Multicluster ClusterProfiles. Absent: not read.
    #[serde(default)]
    pub cluster_profile: Option<ClusterProfileSpec>,
}

/// `cluster_sources.cluster_profile:` as written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterProfileSpec {
    /// The namespace of the ClusterProfiles: no default (the cluster manager chooses it), and
    /// a Role is granted in one.
    pub namespace: String,
    /// Which ClusterProfiles of the namespace are read (default: every one).
    #[serde(default)]
    pub label_selector: Option<String>,
    /// The access-provider file (JSON or YAML, upstream's shape), relative to the config
    /// folder: the providers this consumer can use, each with its exec plugin.
    pub access_providers: PathBuf,
}

/// `cluster_sources.cluster_api:` as written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterApiSpec {
    /// The namespace of the Clusters and their Secrets: no default, Cluster API has no
    /// namespace of its own, and a Role is granted in one.
    pub namespace: String,
    /// Which Secrets of the namespace are read (default `cluster.x-k8s.io/cluster-name`: the
    /// label exists); of those, each `<cluster>-kubeconfig` is a cluster.
    #[serde(default = "default_capi_selector")]
    pub label_selector: String,
}

/// `cluster_sources.argocd:` as written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArgoCdSpec {
    /// The namespace of the Secrets (default `argocd`).
    #[serde(default = "default_namespace")]
    pub namespace: String,
    /// Which Secrets of the namespace are clusters (default
    /// `argocd.argoproj.io/secret-type=cluster`, the label Argo CD gives them).
    #[serde(default = "default_selector")]
    pub label_selector: String,
}

fn default_namespace() -> String {
    ARGOCD_NAMESPACE.to_string()
}

fn default_selector() -> String {
    ARGOCD_SELECTOR.to_string()
}

fn default_capi_selector() -> String {
    CLUSTER_API_SELECTOR.to_string()
}

/// The section after its check: what the source's watch runs with.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterSources {
    /// Absolute; `None`: the in-cluster service account.
    pub kubeconfig: Option<PathBuf>,
    pub argocd: Option<SecretsAt>,
    pub cluster_api: Option<SecretsAt>,
    pub cluster_profile: Option<ProfilesAt>,
}

/// Where the ClusterProfiles are read, and the providers of the access-provider file as read
/// with the main file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfilesAt {
    /// The namespace, and the selector (empty: every profile).
    pub at: SecretsAt,
    /// The file, absolute.
    pub file: PathBuf,
    pub providers: AccessProviders,
}

/// The kinds of inventory read, each with its name in `/status`, the metrics' `source`
/// label, the log and `check`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SourceKind {
    /// Argo CD's cluster Secrets (`argocd`).
    ArgoCd,
    /// Cluster API's kubeconfig Secrets (`cluster_api`).
    ClusterApi,
    /// SIG-Multicluster ClusterProfiles (`cluster_profile`).
    ClusterProfile,
}

impl SourceKind {
    /// Every kind, in the order their names sort (and a cluster name both give goes to the
    /// first).
    pub const ALL: [SourceKind; 3] = [
        SourceKind::ArgoCd,
        SourceKind::ClusterApi,
        SourceKind::ClusterProfile,
    ];

    /// The name: the section's key.
    pub fn name(self) -> &'static str {
        match self {
            SourceKind::ArgoCd => "argocd",
            SourceKind::ClusterApi => "cluster_api",
            SourceKind::ClusterProfile => "cluster_profile",
        }
    }

    /// What its objects are called in messages: `Secret` or `ClusterProfile`.
    pub fn object(self) -> &'static str {
        match self {
            SourceKind::ArgoCd | SourceKind::ClusterApi => "Secret",
            SourceKind::ClusterProfile => "ClusterProfile",
        }
    }

    /// The kind of that name ([`SourceKind::name`]).
    pub fn by_name(name: &str) -> Option<SourceKind> {
        SourceKind::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// What the objects of the source named `name` are called (`Secret` for a name no kind has).
pub fn object_of(name: &str) -> &'static str {
    SourceKind::by_name(name).map_or("Secret", SourceKind::object)
}

/// Where one source's objects are read (an empty selector: every object of the namespace,
/// which only the ClusterProfile source allows).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretsAt {
    pub namespace: String,
    pub label_selector: String,
}

impl ClusterSources {
    /// Whether any source is configured.
    pub fn any(&self) -> bool {
        !self.configured().is_empty()
    }

    /// The sources configured, by kind.
    pub fn configured(&self) -> Vec<(SourceKind, &SecretsAt)> {
        let mut out = Vec::new();
        if let Some(at) = &self.argocd {
            out.push((SourceKind::ArgoCd, at));
        }
        if let Some(at) = &self.cluster_api {
            out.push((SourceKind::ClusterApi, at));
        }
        if let Some(profiles) = &self.cluster_profile {
            out.push((SourceKind::ClusterProfile, &profiles.at));
        }
        out
    }

    /// Whether the section reads a file of its own (the ClusterProfile source's provider
    /// file), which an edit can change without the main file changing.
    pub fn reads_files(&self) -> bool {
        self.cluster_profile.is_some()
    }

    /// The providers of the ClusterProfile source's file (none without that source).
    pub fn providers(&self) -> Option<&AccessProviders> {
        self.cluster_profile.as_ref().map(|p| &p.providers)
    }
}

/// Why the `cluster_sources:` section is refused; the message names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClusterSourcesError {
    #[error(
        "cluster_sources.{0}.namespace: `{1}` is not a namespace name (1-63 characters of \
         a-z, 0-9 and `-`, starting and ending with a letter or digit)"
    )]
    Namespace(&'static str, String),
    #[error(
        "cluster_sources.{0}.label_selector: must not be empty (it would take every Secret \
         of the namespace for a cluster); the default is {1}"
    )]
    EmptySelector(&'static str, &'static str),
    #[error("cluster_sources.{0}.label_selector: {1}")]
    Selector(&'static str, String),
    #[error("cluster_sources.kubeconfig: must not be empty")]
    EmptyKubeconfig,
    #[error("cluster_sources.cluster_profile.access_providers: must not be empty")]
    EmptyProviders,
    #[error("cluster_sources.cluster_profile.access_providers: {0}")]
    Providers(#[from] AccessProvidersError),
}

impl ClusterSourcesSpec {
    /// Checks the section; relative paths are resolved against `root`, the config folder.
    pub fn validate(&self, root: &Path) -> Result<ClusterSources, ClusterSourcesError> {
        let kubeconfig = match &self.kubeconfig {
            Some(p) if p.as_os_str().is_empty() => {
                return Err(ClusterSourcesError::EmptyKubeconfig);
            }
            Some(p) if p.is_absolute() => Some(p.clone()),
            Some(p) => Some(root.join(p)),
            None => None,
        };
        let argocd = match &self.argocd {
            None => None,
            Some(spec) => Some(secrets_at(
                SourceKind::ArgoCd,
                &spec.namespace,
                &spec.label_selector,
                ARGOCD_SELECTOR,
            )?),
        };
        let cluster_api = match &self.cluster_api {
            None => None,
            Some(spec) => Some(secrets_at(
                SourceKind::ClusterApi,
                &spec.namespace,
                &spec.label_selector,
                CLUSTER_API_SELECTOR,
            )?),
        };
        let cluster_profile = match &self.cluster_profile {
            None => None,
            Some(spec) => Some(profiles_at(spec, root)?),
        };
        Ok(ClusterSources {
            kubeconfig,
            argocd,
            cluster_api,
            cluster_profile,
        })
    }
}

/// The ClusterProfile source checked, its provider file read.
fn profiles_at(spec: &ClusterProfileSpec, root: &Path) -> Result<ProfilesAt, ClusterSourcesError> {
    let kind = SourceKind::ClusterProfile;
    if !is_namespace_name(&spec.namespace) {
        return Err(ClusterSourcesError::Namespace(
            kind.name(),
            spec.namespace.clone(),
        ));
    }
    let selector = match spec.label_selector.as_deref().map(str::trim) {
        None | Some("") => String::new(),
        Some(selector) => {
            jobrelay_contract::label_selector::check(selector)
                .map_err(|e| ClusterSourcesError::Selector(kind.name(), e.to_string()))?;
            selector.to_string()
        }
    };
    if spec.access_providers.as_os_str().is_empty() {
        return Err(ClusterSourcesError::EmptyProviders);
    }
    let file = root.join(&spec.access_providers);
    let providers = access_providers::read(&file)?;
    Ok(ProfilesAt {
        at: SecretsAt {
            namespace: spec.namespace.clone(),
            label_selector: selector,
        },
        file,
        providers,
    })
}

/// One source's namespace and selector, checked.
fn secrets_at(
    kind: SourceKind,
    namespace: &str,
    selector: &str,
    default: &'static str,
) -> Result<SecretsAt, ClusterSourcesError> {
    if !is_namespace_name(namespace) {
        return Err(ClusterSourcesError::Namespace(
            kind.name(),
            namespace.to_string(),
        ));
    }
    let selector = selector.trim();
    if selector.is_empty() {
        return Err(ClusterSourcesError::EmptySelector(kind.name(), default));
    }
    jobrelay_contract::label_selector::check(selector)
        .map_err(|e| ClusterSourcesError::Selector(kind.name(), e.to_string()))?;
    Ok(SecretsAt {
        namespace: namespace.to_string(),
        label_selector: selector.to_string(),
    })
}

/// A DNS-1123 label, which is what a namespace is named with.
fn is_namespace_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<ClusterSources, ClusterSourcesError> {
        let spec: ClusterSourcesSpec = serde_yaml_ng::from_str(yaml).expect("parses");
        spec.validate(Path::new("/cfg"))
    }

    #[test]
    fn argocd_defaults_to_its_own_namespace_and_label() {
        let sources = parse("argocd: {}").expect("valid");
        assert_eq!(
            sources.argocd,
            Some(SecretsAt {
                namespace: "argocd".into(),
                label_selector: "argocd.argoproj.io/secret-type=cluster".into(),
            })
        );
        assert_eq!(sources.kubeconfig, None);
        assert!(sources.any());
        assert!(!parse("{}").expect("valid").any());
        let relative = parse("kubeconfig: home.yaml\nargocd: {namespace: gitops}").expect("ok");
        assert_eq!(relative.kubeconfig, Some(PathBuf::from("/cfg/home.yaml")));
        assert_eq!(relative.argocd.expect("argocd").namespace, "gitops");
    }

    #[test]
    fn a_bad_namespace_or_selector_is_refused_naming_the_field() {
        for bad in ["Argo", "-argo", "argo-", "", "a_b"] {
            let e = parse(&format!("argocd: {{namespace: '{bad}'}}"))
                .expect_err(bad)
                .to_string();
            assert!(e.starts_with("cluster_sources.argocd.namespace:"), "{e}");
        }
        let e = parse("argocd: {label_selector: ' '}")
            .expect_err("empty")
            .to_string();
        assert!(
            e.starts_with("cluster_sources.argocd.label_selector:"),
            "{e}"
        );
        let e = parse("argocd: {label_selector: 'a in (b'}")
            .expect_err("broken")
            .to_string();
        assert!(
            e.starts_with("cluster_sources.argocd.label_selector:"),
            "{e}"
        );
        let e = parse("kubeconfig: ''\nargocd: {}")
            .expect_err("empty path")
            .to_string();
        assert!(e.starts_with("cluster_sources.kubeconfig"), "{e}");
    }

    #[test]
    fn cluster_api_needs_its_namespace_and_defaults_to_its_label() {
        let sources = parse("cluster_api: {namespace: fleet}").expect("valid");
        assert_eq!(
            sources.cluster_api,
            Some(SecretsAt {
                namespace: "fleet".into(),
                label_selector: "cluster.x-k8s.io/cluster-name".into(),
            })
        );
        assert!(sources.any());
        assert_eq!(
            sources
                .configured()
                .iter()
                .map(|(kind, _)| kind.name())
                .collect::<Vec<_>>(),
            ["cluster_api"]
        );
        let missing = serde_yaml_ng::from_str::<ClusterSourcesSpec>("cluster_api: {}")
            .expect_err("no namespace")
            .to_string();
        assert!(missing.contains("namespace"), "{missing}");
        let e = parse("cluster_api: {namespace: Fleet}")
            .expect_err("bad")
            .to_string();
        assert!(
            e.starts_with("cluster_sources.cluster_api.namespace:"),
            "{e}"
        );
        let e = parse("cluster_api: {namespace: fleet, label_selector: ''}")
            .expect_err("empty")
            .to_string();
        assert!(
            e.starts_with("cluster_sources.cluster_api.label_selector:")
                && e.contains("cluster.x-k8s.io/cluster-name"),
            "{e}"
        );
    }

    #[test]
    fn cluster_profile_needs_its_namespace_and_reads_its_provider_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("providers.json");
        std::fs::write(
            &file,
            r#"{"providers":[{"name":"token","execConfig":{"command":"/bin/t"}}]}"#,
        )
        .expect("write");
        let spec: ClusterSourcesSpec = serde_yaml_ng::from_str(
            "cluster_profile: {namespace: inventory, access_providers: providers.json}",
        )
        .expect("parses");
        let sources = spec.validate(dir.path()).expect("valid");
        let profiles = sources.cluster_profile.clone().expect("profiles");
        assert_eq!(profiles.at.namespace, "inventory");
        assert_eq!(profiles.at.label_selector, "");
        assert_eq!(profiles.file, file);
        assert_eq!(profiles.providers["token"].command, "/bin/t");
        assert_eq!(
            sources
                .configured()
                .iter()
                .map(|(k, _)| k.name())
                .collect::<Vec<_>>(),
            ["cluster_profile"]
        );
        let e = serde_yaml_ng::from_str::<ClusterSourcesSpec>("cluster_profile: {namespace: a}")
            .expect_err("no file")
            .to_string();
        assert!(e.contains("access_providers"), "{e}");
        let e = parse("cluster_profile: {namespace: a, access_providers: gone.json}")
            .expect_err("no file")
            .to_string();
        assert!(
            e.starts_with("cluster_sources.cluster_profile.access_providers: /cfg/gone.json:"),
            "{e}"
        );
        let e = parse("cluster_profile: {namespace: A, access_providers: p.json}")
            .expect_err("bad")
            .to_string();
        assert!(
            e.starts_with("cluster_sources.cluster_profile.namespace:"),
            "{e}"
        );
        assert_eq!(object_of("cluster_profile"), "ClusterProfile");
        assert_eq!(object_of("argocd"), "Secret");
    }
}
