//! What a cluster source on the home cluster says, kept object by object with the last good
//! version of each.
//!
//! The same rule as for files: an object (a Secret) whose current version cannot be made a
//! cluster keeps the cluster its last good version described, and is reported by its
//! `namespace/name` until it is fixed or deleted (a ClusterProfile alike); only a deleted object (or one the selector
//! no longer takes) removes its cluster. Two objects that name the same cluster: the first by
//! `namespace/name` gives it, the other is refused naming both.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;

use jobrelay_fleet::availability::Source;

use super::argocd_secret::ArgoSecretError;
use super::capi_secret::CapiSecretError;
use super::cluster_profile::ProfileError;
use super::sources::ClusterSource;

/// Where a cluster from a Secret came from, as its source's `path` says it (the log's
/// `file=` and `check`'s lines): `secret NAMESPACE/NAME`.
pub fn origin(key: &str) -> PathBuf {
    PathBuf::from(format!("secret {key}"))
}

/// Why an object of a source is no cluster, by the source it is of.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ObjectError {
    /// An Argo CD cluster Secret.
    #[error(transparent)]
    ArgoCd(#[from] ArgoSecretError),
    /// A Cluster API kubeconfig Secret.
    #[error(transparent)]
    ClusterApi(#[from] CapiSecretError),
    /// A ClusterProfile.
    #[error(transparent)]
    ClusterProfile(#[from] ProfileError),
}

/// What one object's current version makes: its cluster, or why it is none.
pub type Parsed = Result<ClusterSource, ObjectError>;

/// What an object says of its cluster's control plane, when it says something against it
/// (fed to the cluster's availability: [`jobrelay_fleet::availability::Source`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Readiness {
    pub state: Source,
    /// The object and its words: `ClusterProfile NS/NAME: ControlPlaneHealthy is False
    /// (REASON): MESSAGE`, the message cut to [`DETAIL_MAX`] characters.
    pub detail: String,
}

/// The most characters of an object's own message a [`Readiness`] keeps.
pub const DETAIL_MAX: usize = 200;

/// `text` cut to [`DETAIL_MAX`] characters, with `…` where it was cut.
pub fn clipped(text: &str) -> String {
    match text.char_indices().nth(DETAIL_MAX) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

/// One object's standing.
#[derive(Debug, Clone, Default)]
struct Entry {
    /// The cluster its last good version described.
    good: Option<ClusterSource>,
    /// Why its current version is refused, if it is.
    problem: Option<ObjectError>,
}

/// The objects of one source, by `namespace/name`.
#[derive(Debug, Clone, Default)]
pub struct Inventory {
    entries: BTreeMap<String, Entry>,
    /// What each object's current version says of its control plane, where it says
    /// something against it; read from every version, a refused one too (it is the news).
    readiness: BTreeMap<String, Readiness>,
}

/// The clusters of one source at one moment, and the objects refused.
#[derive(Debug, Clone, Default)]
pub struct InventorySnapshot {
    /// Cluster name → (the object's `namespace/name`, the cluster).
    pub clusters: BTreeMap<String, (String, ClusterSource)>,
    /// `namespace/name` → why it is refused (its last good cluster, if any, stays).
    pub refused: BTreeMap<String, String>,
    /// Cluster name → what its object says against its control plane (clusters whose
    /// object says nothing against it are not here).
    pub readiness: BTreeMap<String, Readiness>,
}

impl Inventory {
    /// An object was added or changed: `parsed` is what its current version makes.
    pub fn apply(&mut self, key: String, parsed: Parsed) {
        let entry = self.entries.entry(key).or_default();
        match parsed {
            Ok(source) => {
                entry.good = Some(source);
                entry.problem = None;
            }
            Err(why) => entry.problem = Some(why),
        }
    }

    /// What an object's current version says of its control plane (`None`: nothing
    /// against it).
    pub fn set_readiness(&mut self, key: &str, readiness: Option<Readiness>) {
        match readiness {
            Some(readiness) => {
                self.readiness.insert(key.to_string(), readiness);
            }
            None => {
                self.readiness.remove(key);
            }
        }
    }

    /// An object was deleted: its cluster goes with it.
    pub fn remove(&mut self, key: &str) {
        self.entries.remove(key);
        self.readiness.remove(key);
    }

    /// A full list: objects not in it are gone, those in it are applied.
    pub fn replace(&mut self, listed: Vec<(String, Parsed)>) {
        let keep: std::collections::BTreeSet<&String> = listed.iter().map(|(k, _)| k).collect();
        self.entries.retain(|key, _| keep.contains(key));
        self.readiness.retain(|key, _| keep.contains(key));
        for (key, parsed) in listed {
            self.apply(key, parsed);
        }
    }

    /// The clusters and the refused objects now.
    pub fn snapshot(&self) -> InventorySnapshot {
        let mut out = InventorySnapshot::default();
        for (key, entry) in &self.entries {
            if let Some(why) = &entry.problem {
                let kept = if entry.good.is_some() {
                    "; its last good credentials stay in force"
                } else {
                    ""
                };
                out.refused.insert(key.clone(), format!("{why}{kept}"));
            }
            let Some(source) = &entry.good else { continue };
            if let Some((first, _)) = out.clusters.get(&source.name) {
                out.refused.insert(
                    key.clone(),
                    format!(
                        "the cluster name `{}` is already given by Secret {first}",
                        source.name
                    ),
                );
                continue;
            }
            if let Some(readiness) = self.readiness.get(key) {
                out.readiness.insert(source.name.clone(), readiness.clone());
            }
            out.clusters
                .insert(source.name.clone(), (key.clone(), source.clone()));
        }
        out
    }
}

/// One source as `/status` shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SourceStatus {
    /// Where it reads: `NAMESPACE` and the label selector.
    pub namespace: String,
    pub label_selector: String,
    /// Whether the objects have been listed since the watch (re)started.
    pub listed: bool,
    /// Cluster name → the Secret (`namespace/name`) it comes from.
    pub clusters: BTreeMap<String, String>,
    /// Secrets refused (`namespace/name` → why); the last good credentials of one stay.
    pub refused: BTreeMap<String, String>,
    /// Why the watch fails, while it does (the clusters as last read stay).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Why Cluster API's Clusters cannot be read, while they cannot (the `cluster_api`
    /// source; its clusters then are judged by their health checks alone).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub control_planes_error: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(name: &str, sha: &str) -> ClusterSource {
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: {name}\n  cluster:\n    server: \
             https://10.0.0.1\n"
        );
        ClusterSource {
            name: name.into(),
            path: origin(name),
            sha256: sha.into(),
            kubeconfig: std::sync::Arc::new(
                kube::config::Kubeconfig::from_yaml(&text).expect("kubeconfig"),
            ),
        }
    }

    #[test]
    fn a_refused_version_keeps_the_last_good_cluster_until_deleted() {
        let mut inventory = Inventory::default();
        inventory.apply("argocd/a".into(), Ok(source("a", "1")));
        inventory.apply(
            "argocd/b".into(),
            Err(ArgoSecretError::Missing("config").into()),
        );
        let snap = inventory.snapshot();
        assert_eq!(snap.clusters.keys().collect::<Vec<_>>(), ["a"]);
        assert_eq!(snap.refused["argocd/b"], "data.config: missing");

        inventory.apply(
            "argocd/a".into(),
            Err(ArgoSecretError::ConfigSyntax { line: 1, column: 2 }.into()),
        );
        let snap = inventory.snapshot();
        assert_eq!(snap.clusters["a"].1.sha256, "1", "the last good stays");
        assert!(snap.refused["argocd/a"].contains("last good credentials stay"));

        inventory.apply("argocd/a".into(), Ok(source("a", "2")));
        let snap = inventory.snapshot();
        assert_eq!(snap.clusters["a"].1.sha256, "2");
        assert!(!snap.refused.contains_key("argocd/a"));

        inventory.remove("argocd/a");
        assert!(inventory.snapshot().clusters.is_empty());
        inventory.replace(vec![("argocd/c".into(), Ok(source("c", "3")))]);
        let snap = inventory.snapshot();
        assert_eq!(snap.clusters.keys().collect::<Vec<_>>(), ["c"]);
        assert!(snap.refused.is_empty(), "b is gone with the new list");
    }

    /// What an object says of its control plane follows its current version (a refused
    /// one too) and names the cluster its last good version gave; it goes with the object.
    #[test]
    fn readiness_follows_the_object_and_goes_with_it() {
        let unhealthy = Readiness {
            state: Source::Unhealthy,
            detail: "ClusterProfile fleet/a: ControlPlaneHealthy is False".into(),
        };
        let mut inventory = Inventory::default();
        inventory.apply("fleet/a".into(), Ok(source("a", "1")));
        inventory.set_readiness("fleet/a", Some(unhealthy.clone()));
        assert_eq!(inventory.snapshot().readiness["a"], unhealthy);
        inventory.apply(
            "fleet/a".into(),
            Err(ArgoSecretError::Missing("config").into()),
        );
        assert_eq!(inventory.snapshot().readiness["a"], unhealthy);
        inventory.set_readiness("fleet/a", None);
        assert!(inventory.snapshot().readiness.is_empty());
        inventory.set_readiness("fleet/a", Some(unhealthy.clone()));
        inventory.replace(vec![("fleet/b".into(), Ok(source("b", "2")))]);
        inventory.apply("fleet/a".into(), Ok(source("a", "1")));
        assert!(
            inventory.snapshot().readiness.is_empty(),
            "gone with the list that lacked it"
        );
        assert_eq!(
            clipped(&"é".repeat(DETAIL_MAX + 5)).chars().count(),
            DETAIL_MAX + 1
        );
        assert_eq!(clipped("short"), "short");
    }

    #[test]
    fn two_secrets_naming_one_cluster_the_second_is_refused_naming_the_first() {
        let mut inventory = Inventory::default();
        inventory.apply("argocd/z".into(), Ok(source("prod", "1")));
        inventory.apply("argocd/m".into(), Ok(source("prod", "2")));
        let snap = inventory.snapshot();
        assert_eq!(snap.clusters["prod"].0, "argocd/m");
        assert_eq!(
            snap.refused["argocd/z"],
            "the cluster name `prod` is already given by Secret argocd/m"
        );
    }
}
