//! Kubeconfig files for simulated clusters.
//!
//! The daemon learns clusters from kubeconfig files in a watched folder (file stem = cluster
//! name), so tests hand it real kubeconfigs: one cluster, one user with a bearer token, and one
//! context named after the cluster that is also the current context. Files are written
//! atomically because the daemon reacts to file events and must never read half a file.

use std::path::Path;

use anyhow::Context as _;
use serde_json::json;

/// What goes into a kubeconfig.
#[derive(Clone, Copy, Debug)]
pub struct KubeconfigSpec<'a> {
    /// Cluster, user and context name.
    pub name: &'a str,
    /// API server URL, e.g. `http://127.0.0.1:PORT`.
    pub server: &'a str,
    /// Bearer token.
    pub token: &'a str,
    /// Default namespace of the context, if any.
    pub namespace: Option<&'a str>,
}

/// Renders a kubeconfig as YAML.
pub fn render(spec: &KubeconfigSpec<'_>) -> String {
    let mut context = json!({ "cluster": spec.name, "user": spec.name });
    if let Some(ns) = spec.namespace {
        context["namespace"] = json!(ns);
    }
    let doc = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{ "name": spec.name, "cluster": { "server": spec.server } }],
        "users": [{ "name": spec.name, "user": { "token": spec.token } }],
        "contexts": [{ "name": spec.name, "context": context }],
        "current-context": spec.name,
        "preferences": {},
    });
    // A JSON value of strings and maps always serialises.
    serde_yaml_ng::to_string(&doc).unwrap_or_default()
}

/// Writes `contents` to `path` through a temporary file in the same directory and a rename.
pub fn write_atomic(path: &Path, contents: &str) -> anyhow::Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or_else(|| Path::new("."));
    let file_name = path
        .file_name()
        .with_context(|| format!("{} has no file name", path.display()))?;
    let tmp = dir.join(format!(
        ".{}.tmp-{:08x}",
        file_name.to_string_lossy(),
        fastrand::u32(..)
    ));
    std::fs::write(&tmp, contents).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path)
        .with_context(|| format!("renaming {} to {}", tmp.display(), path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_a_complete_kubeconfig() {
        let yaml = render(&KubeconfigSpec {
            name: "east: 1",
            server: "http://127.0.0.1:1234",
            token: "t0k",
            namespace: Some("ml"),
        });
        let doc: serde_json::Value = serde_yaml_ng::from_str(&yaml).unwrap();
        assert_eq!(doc["current-context"], "east: 1");
        assert_eq!(
            doc["clusters"][0]["cluster"]["server"],
            "http://127.0.0.1:1234"
        );
        assert_eq!(doc["users"][0]["user"]["token"], "t0k");
        assert_eq!(doc["contexts"][0]["context"]["namespace"], "ml");
    }
}
