//! Discovery documents: `/version`, `/api`, `/apis`, `/apis/{group}` and the per group-version
//! `APIResourceList`s, built from the registry.
//!
//! kube's `Discovery` and `Client::apiserver_version()` read these, and a daemon that checks
//! whether a CRD is installed before watching it does too.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use super::resources::ResourceKind;

/// The `/version` document.
pub(crate) fn version(minor: u32) -> Value {
    json!({
        "major": "1",
        "minor": minor.to_string(),
        "emulationMajor": "1",
        "emulationMinor": minor.to_string(),
        "minCompatibilityMajor": "1",
        "minCompatibilityMinor": (minor.saturating_sub(1)).to_string(),
        "gitVersion": format!("v1.{minor}.0-jobrelay-sim"),
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-01-01T00:00:00Z",
        "goVersion": "go1.24.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

/// `/api`: the core group's versions.
pub(crate) fn core_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{ "clientCIDR": "0.0.0.0/0", "serverAddress": server_address }],
    })
}

/// Versions of each named group, preferred version first.
fn groups(kinds: &[Arc<ResourceKind>]) -> BTreeMap<String, Vec<String>> {
    let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for kind in kinds.iter().filter(|k| !k.gvr.group.is_empty()) {
        let versions = groups.entry(kind.gvr.group.to_string()).or_default();
        if !versions.iter().any(|v| v == kind.gvr.version.as_ref()) {
            versions.push(kind.gvr.version.to_string());
        }
    }
    for versions in groups.values_mut() {
        versions.sort_by_key(|v| std::cmp::Reverse(version_priority(v)));
    }
    groups
}

fn group_doc(name: &str, versions: &[String]) -> Value {
    let entries: Vec<Value> = versions
        .iter()
        .map(|v| json!({ "groupVersion": format!("{name}/{v}"), "version": v }))
        .collect();
    json!({
        "name": name,
        "versions": entries,
        "preferredVersion": entries.first().cloned().unwrap_or(Value::Null),
    })
}

/// `/apis`: every named group.
pub(crate) fn group_list(kinds: &[Arc<ResourceKind>]) -> Value {
    let groups: Vec<Value> = groups(kinds)
        .iter()
        .map(|(name, versions)| group_doc(name, versions))
        .collect();
    json!({ "kind": "APIGroupList", "apiVersion": "v1", "groups": groups })
}

/// `/apis/{group}`, or `None` for an unknown group.
pub(crate) fn group(kinds: &[Arc<ResourceKind>], name: &str) -> Option<Value> {
    let groups = groups(kinds);
    let versions = groups.get(name)?;
    let mut doc = group_doc(name, versions);
    doc["kind"] = json!("APIGroup");
    doc["apiVersion"] = json!("v1");
    Some(doc)
}

/// `/api/v1` or `/apis/{group}/{version}`, or `None` when nothing is registered there.
pub(crate) fn resource_list(
    kinds: &[Arc<ResourceKind>],
    group: &str,
    version: &str,
) -> Option<Value> {
    let mut resources = Vec::new();
    for kind in kinds
        .iter()
        .filter(|k| k.gvr.group == group && k.gvr.version == version)
    {
        let mut main = json!({
            "name": kind.gvr.plural,
            "singularName": kind.singular,
            "namespaced": kind.namespaced,
            "kind": kind.kind,
            "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
        });
        if !kind.short_names.is_empty() {
            main["shortNames"] = json!(kind.short_names);
        }
        resources.push(main);
        if kind.status_subresource {
            resources.push(json!({
                "name": format!("{}/status", kind.gvr.plural),
                "singularName": "",
                "namespaced": kind.namespaced,
                "kind": kind.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
        if kind.log_subresource {
            resources.push(json!({
                "name": format!("{}/log", kind.gvr.plural),
                "singularName": "",
                "namespaced": kind.namespaced,
                "kind": kind.kind,
                "verbs": ["get"],
            }));
        }
    }
    if resources.is_empty() {
        return None;
    }
    let group_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    }))
}

/// Aggregated discovery (`apidiscovery.k8s.io/v2 APIGroupDiscoveryList`): every group with
/// its versions and resources in one document. `core` selects the `/api` document (the core
/// group only) instead of `/apis` (all named groups).
pub(crate) fn aggregated(kinds: &[Arc<ResourceKind>], core: bool) -> Value {
    let mut by_group: BTreeMap<String, Vec<String>> = groups(kinds);
    if core {
        by_group = BTreeMap::from([(String::new(), vec!["v1".to_string()])]);
    }
    let items: Vec<Value> = by_group
        .iter()
        .map(|(group, versions)| {
            let versions: Vec<Value> = versions
                .iter()
                .map(|version| {
                    let resources: Vec<Value> = kinds
                        .iter()
                        .filter(|k| {
                            k.gvr.group == group.as_str() && k.gvr.version == version.as_str()
                        })
                        .map(|k| aggregated_resource(k))
                        .collect();
                    json!({ "version": version, "resources": resources, "freshness": "Current" })
                })
                .collect();
            json!({ "metadata": { "name": group }, "versions": versions })
        })
        .collect();
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": items,
    })
}

fn aggregated_resource(kind: &ResourceKind) -> Value {
    let response_kind =
        json!({ "group": kind.gvr.group, "version": kind.gvr.version, "kind": kind.kind });
    let mut subresources = Vec::new();
    if kind.status_subresource {
        subresources.push(json!({ "subresource": "status", "responseKind": response_kind, "verbs": ["get", "patch", "update"] }));
    }
    if kind.log_subresource {
        subresources.push(json!({ "subresource": "log", "responseKind": { "group": "", "version": "", "kind": "" }, "verbs": ["get"] }));
    }
    json!({
        "resource": kind.gvr.plural,
        "responseKind": response_kind,
        "scope": if kind.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": kind.singular,
        "shortNames": kind.short_names,
        "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
        "subresources": subresources,
    })
}

/// Kubernetes version priority: GA above beta above alpha, higher numbers first; anything
/// that is not of the `vN[alpha|betaM]` form sorts last.
fn version_priority(v: &str) -> (u8, u32, u32) {
    let Some(rest) = v.strip_prefix('v') else {
        return (0, 0, 0);
    };
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let Ok(major) = digits.parse::<u32>() else {
        return (0, 0, 0);
    };
    let tail = &rest[digits.len()..];
    let (tier, minor) = if tail.is_empty() {
        (3, 0)
    } else if let Some(n) = tail.strip_prefix("beta") {
        (2, n.parse().unwrap_or(0))
    } else if let Some(n) = tail.strip_prefix("alpha") {
        (1, n.parse().unwrap_or(0))
    } else {
        (0, 0)
    };
    (tier, major, minor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preferred_versions() {
        let kinds: Vec<Arc<ResourceKind>> = ResourceKind::builtins(true)
            .into_iter()
            .map(Arc::new)
            .collect();
        let doc = group(&kinds, "kubeflow.org").unwrap();
        assert_eq!(doc["preferredVersion"]["version"], "v1");
        assert_eq!(doc["versions"][1]["version"], "v2beta1");
        assert!(group(&kinds, "nope").is_none());
        let list = group_list(&kinds);
        assert!(
            list["groups"]
                .as_array()
                .unwrap()
                .iter()
                .any(|g| g["name"] == "batch.volcano.sh")
        );
    }

    #[test]
    fn resource_lists_have_subresources() {
        let kinds: Vec<Arc<ResourceKind>> = ResourceKind::builtins(true)
            .into_iter()
            .map(Arc::new)
            .collect();
        let core = resource_list(&kinds, "", "v1").unwrap();
        let names: Vec<&str> = core["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        assert!(names.contains(&"pods/log"));
        assert!(names.contains(&"pods/status"));
        assert!(names.contains(&"namespaces"));
        assert!(resource_list(&kinds, "batch", "v2").is_none());
    }
}
