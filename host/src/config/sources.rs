//! Validated sources: a cluster's kubeconfig and a plugin's resolved manifest, each tagged with
//! the hash that says whether it changed.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use kube::config::Kubeconfig;

use super::ConfigError;
use super::files::{ComponentFiles, FileRead, sha256_hex};
use super::main_file::MainConfig;
use super::manifest::{FleetEventSort, PluginManifest};
use crate::oci::{FetchError, OciRef, Registries};
use jobrelay_lanes::filter::Filter;
use jobrelay_lanes::settings::{FleetEvents, LaneSettings};
use jobrelay_runtime::PluginSpec;

/// One cluster: a kubeconfig file whose stem is the cluster's name, the home cluster's service
/// account, or an object of a cluster source (an Argo CD cluster Secret, a Cluster API
/// kubeconfig Secret) made a kubeconfig.
#[derive(Debug, Clone)]
pub struct ClusterSource {
    pub name: String,
    /// Where it came from, for messages: the kubeconfig file, the service account's folder,
    /// or `secret NAMESPACE/NAME`.
    pub path: PathBuf,
    /// Content hash: a cluster is restarted only when this changes.
    pub sha256: String,
    pub kubeconfig: Arc<Kubeconfig>,
}

/// Cluster names end up in event ids (`cluster/uid/resourceVersion`) and metric labels, so they
/// are restricted to the characters of a Kubernetes name.
pub fn validate_cluster_name(name: &str) -> Result<(), ConfigError> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
        && !name.starts_with('-');
    if ok {
        Ok(())
    } else {
        Err(ConfigError::Invalid(format!(
            "cluster name `{name}` (the file stem) must be 1-63 characters of a-z, 0-9, `-`, `_`"
        )))
    }
}

impl ClusterSource {
    pub fn parse(name: &str, file: &FileRead) -> Result<ClusterSource, ConfigError> {
        validate_cluster_name(name)?;
        let content = file
            .content
            .as_ref()
            .map_err(|e| ConfigError::Read(e.to_string()))?;
        let text = content
            .text()
            .map_err(|e| ConfigError::Parse(e.to_string()))?;
        let kubeconfig =
            Kubeconfig::from_yaml(text).map_err(|e| ConfigError::Parse(e.to_string()))?;
        Self::from_kubeconfig(name, file.path.clone(), content.sha256.clone(), kubeconfig)
    }

    /// The cluster a parsed kubeconfig describes, judged as its connection will use it: the
    /// current context (the only one when none is named) must exist and its cluster have a
    /// `server`, and the client configuration must build (CA data that is not base64 is
    /// refused). The kubeconfig files and the Cluster API source's Secrets both pass here.
    /// The messages name entries and fields, never a credential.
    pub fn from_kubeconfig(
        name: &str,
        path: PathBuf,
        sha256: String,
        mut kubeconfig: Kubeconfig,
    ) -> Result<ClusterSource, ConfigError> {
        if kubeconfig.clusters.is_empty() {
            return Err(ConfigError::Invalid("kubeconfig has no clusters".into()));
        }
        if kubeconfig.current_context.is_none() {
            match kubeconfig.contexts.as_slice() {
                [only] => kubeconfig.current_context = Some(only.name.clone()),
                _ => {
                    return Err(ConfigError::Invalid(
                        "kubeconfig has no current-context and not exactly one context".into(),
                    ));
                }
            }
        }
        // The most common omission is named as such: kube's own error for it does not say
        // `server`.
        if let Some(cluster) = current_cluster(&kubeconfig)
            && cluster
                .cluster
                .as_ref()
                .and_then(|c| c.server.as_deref())
                .is_none_or(|s| s.trim().is_empty())
        {
            return Err(ConfigError::Invalid(format!(
                "kubeconfig: cluster `{}` has no `server` (the API server's URL, e.g. \
                 https://10.0.0.1:6443)",
                cluster.name
            )));
        }
        // Build the client configuration now, as the cluster's connection will: a kubeconfig
        // that parses but cannot work (no server, a context or cluster that is not there, CA
        // data that is not base64) is refused here, so it never replaces a working one.
        kube::Config::try_from(kubeconfig.clone())
            .map_err(|e| ConfigError::Invalid(format!("kubeconfig: {e}")))?;
        Ok(ClusterSource {
            name: name.to_string(),
            path,
            sha256,
            kubeconfig: Arc::new(kubeconfig),
        })
    }
}

/// The API server's URL of the kubeconfig's current context, as messages name it: without
/// any user and password a URL could hold (`https://user:pass@host` becomes `https://host`).
pub fn server_of(kubeconfig: &Kubeconfig) -> Option<String> {
    let server = current_cluster(kubeconfig)?
        .cluster
        .as_ref()?
        .server
        .as_deref()?
        .trim();
    Some(match server.split_once("://") {
        Some((scheme, rest)) => {
            let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
            let host = authority
                .rsplit_once('@')
                .map_or(authority, |(_, host)| host);
            format!("{scheme}://{host}{path}")
        }
        None => server.to_string(),
    })
}

/// The cluster entry the current context names, if both are there.
fn current_cluster(kubeconfig: &Kubeconfig) -> Option<&kube::config::NamedCluster> {
    let current = kubeconfig.current_context.as_deref()?;
    let context = kubeconfig.contexts.iter().find(|c| c.name == current)?;
    let cluster = &context.context.as_ref()?.cluster;
    kubeconfig.clusters.iter().find(|c| c.name == *cluster)
}

/// One plugin: its manifest resolved against the main file's defaults, plus its component.
/// It is the two things the layers below take, and where they came from.
#[derive(Debug, Clone)]
pub struct PluginSource {
    pub manifest_path: PathBuf,
    /// The component's file; for a registry component, its reference as written.
    pub wasm_path: PathBuf,
    /// A component in a registry, fetched when the version is loaded (`spec.wasm` is empty
    /// until then; see [`PluginSource::loadable`]).
    pub oci: Option<OciRef>,
    /// What the runtime loads: the name, this version's id (the component and every effective
    /// setting: a change of either is a reload), the component, limits, `config` and grants
    /// (host paths made absolute).
    pub spec: PluginSpec,
    /// How its lane delivers.
    pub lane: LaneSettings,
}

impl PluginSource {
    /// The spec with its component: as read at scan for a file, fetched now (from the cache or
    /// the registry, verified against the pin) for a registry component.
    pub async fn loadable(&self, registries: &Registries) -> Result<PluginSpec, FetchError> {
        let mut spec = self.spec.clone();
        if let Some(reference) = &self.oci {
            let pulled = registries.fetch(reference).await?;
            spec.wasm = pulled.bytes;
            spec.wasm_sha256 = pulled.sha256;
        }
        Ok(spec)
    }

    /// Resolve a manifest file. `root` is the config folder.
    pub fn parse(
        name: &str,
        file: &FileRead,
        main: &MainConfig,
        root: &Path,
        components: &mut ComponentFiles,
    ) -> Result<PluginSource, ConfigError> {
        let content = file
            .content
            .as_ref()
            .map_err(|e| ConfigError::Read(e.to_string()))?;
        let text = content
            .text()
            .map_err(|e| ConfigError::Parse(e.to_string()))?;
        let manifest: PluginManifest =
            serde_yaml_ng::from_str(text).map_err(|e| ConfigError::Parse(e.to_string()))?;
        let (kinds_field, kinds) = match (&manifest.kinds[..], &manifest.filter.kinds[..]) {
            (_, []) => ("kinds", manifest.kinds.clone()),
            ([], filtered) => ("filter.kinds", filtered.to_vec()),
            _ => {
                return Err(ConfigError::Invalid(
                    "filter.kinds: give the kinds once, in `kinds` or in `filter.kinds`".into(),
                ));
            }
        };
        for kind in &kinds {
            if main.kind(kind).is_none() {
                return Err(ConfigError::Invalid(format!(
                    "{kinds_field}: `{kind}` is not a kind of the main file"
                )));
            }
        }
        let filter = Filter::new(manifest.filter.clone())
            .map_err(|e| ConfigError::Invalid(e.to_string()))?;
        let defaults = &main.plugin_defaults;
        let timeout_ms = manifest.timeout_ms.unwrap_or(defaults.timeout_ms);
        let memory_mb = manifest.memory_mb.unwrap_or(defaults.memory_mb);
        let concurrency = manifest.concurrency.unwrap_or(defaults.concurrency);
        use super::{bounds, in_range};
        // A value from `plugin_defaults` was checked with the main file; only the manifest's
        // own values are judged here, so an error always names the file that holds it.
        if let Some(v) = manifest.timeout_ms {
            in_range("timeout_ms", v, 1, bounds::TIMEOUT_MS)?;
        }
        if let Some(v) = manifest.memory_mb {
            in_range("memory_mb", v, 1, bounds::MEMORY_MB)?;
        }
        if let Some(v) = manifest.concurrency {
            in_range("concurrency", v, 1, bounds::CONCURRENCY)?;
        }
        if let Some(v) = manifest.max_queued_per_job {
            in_range("max_queued_per_job", v, 2, bounds::QUEUED_PER_JOB)?;
        }
        if let Some(v) = manifest.max_inbox_events {
            in_range("max_inbox_events", v, 1, bounds::INBOX_EVENTS)?;
        }
        if let Some(v) = manifest.instance_reuse {
            in_range("instance_reuse", v, 1, bounds::INSTANCE_REUSE)?;
        }
        let retry = &manifest.retry;
        in_range(
            "retry.max_attempts",
            retry.max_attempts,
            1,
            bounds::ATTEMPTS,
        )?;
        in_range(
            "retry.min_delay_ms",
            retry.min_delay_ms,
            1,
            bounds::DELAY_MS,
        )?;
        in_range(
            "retry.max_delay_ms",
            retry.max_delay_ms,
            retry.min_delay_ms,
            bounds::DELAY_MS,
        )?;
        let max_queued_per_job = manifest
            .max_queued_per_job
            .unwrap_or(jobrelay_lanes::settings::DEFAULT_MAX_QUEUED_PER_JOB);
        let max_inbox_events = manifest
            .max_inbox_events
            .unwrap_or(jobrelay_lanes::settings::DEFAULT_MAX_INBOX_EVENTS);
        let instance_reuse = manifest.instance_reuse.unwrap_or(1);
        for (i, limit) in manifest.rate_limits.iter().enumerate() {
            limit
                .validate()
                .map_err(|e| ConfigError::Invalid(format!("rate_limits[{i}]: {e}")))?;
        }
        let mut grants = manifest.grants.clone();
        for (i, dir) in grants.filesystem.iter_mut().enumerate() {
            if !dir.guest.starts_with('/') {
                return Err(ConfigError::Invalid(format!(
                    "grants.filesystem[{i}].guest: `{}` must be an absolute guest path",
                    dir.guest
                )));
            }
            if dir.host.is_relative() {
                dir.host = root.join(&dir.host);
            }
        }
        let wasm_text = manifest.wasm.to_string_lossy();
        let (wasm_path, oci, wasm, wasm_sha256) = if OciRef::is_oci(&wasm_text) {
            let reference = OciRef::parse(&wasm_text)
                .map_err(|e| ConfigError::Invalid(format!("wasm: {e}")))?;
            // The pinned digest stands for the bytes: the same reference is the same content.
            let pin = reference.digest_hex.clone();
            (
                manifest.wasm.clone(),
                Some(reference),
                Arc::from(Vec::new()),
                pin,
            )
        } else {
            let wasm_path = if manifest.wasm.is_absolute() {
                manifest.wasm.clone()
            } else {
                main.plugin_dir.join(&manifest.wasm)
            };
            let component = components
                .read(&wasm_path)
                .map_err(|e| ConfigError::Read(format!("wasm `{}`: {e}", wasm_path.display())))?;
            (wasm_path, None, component.bytes, component.sha256)
        };
        let effective = serde_json::json!({
            "wasm": wasm_sha256, "kinds": kinds, "timeout_ms": timeout_ms,
            "memory_mb": memory_mb, "concurrency": concurrency, "config": manifest.config,
            "grants": grants, "delivery": manifest.delivery, "retry": manifest.retry,
            "rate_limits": manifest.rate_limits, "instance_reuse": instance_reuse,
            "max_queued_per_job": max_queued_per_job, "max_inbox_events": max_inbox_events,
        });
        let mut effective = effective;
        // Only a filter that is set takes part, so a manifest without one keeps its version.
        if manifest.filter != jobrelay_lanes::filter::FilterSpec::default() {
            effective["filter"] = serde_json::json!(manifest.filter);
        }
        let mut sorts = manifest.fleet_events.clone();
        sorts.sort();
        sorts.dedup();
        if !sorts.is_empty() {
            effective["fleet_events"] = serde_json::json!(sorts);
        }
        let fleet_events = FleetEvents {
            clusters: sorts.contains(&FleetEventSort::Clusters),
            rules: sorts.contains(&FleetEventSort::Rules),
        };
        let version = sha256_hex(effective.to_string().as_bytes())[..12].to_string();
        Ok(PluginSource {
            manifest_path: file.path.clone(),
            wasm_path,
            oci,
            spec: PluginSpec {
                name: name.to_string(),
                version,
                wasm,
                wasm_sha256,
                timeout: Duration::from_millis(timeout_ms),
                memory_bytes: memory_mb * 1024 * 1024,
                instance_reuse,
                config: manifest.config,
                grants,
            },
            lane: LaneSettings {
                mode: manifest.delivery,
                concurrency,
                retry: manifest.retry,
                rate_limits: manifest.rate_limits,
                kinds,
                filter: Arc::new(filter),
                max_queued_per_job,
                max_inbox_events,
                fleet_events,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kubeconfig(server: &str) -> Kubeconfig {
        Kubeconfig::from_yaml(&format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: \
             {server}\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\n\
             current-context: x\nusers:\n- name: u\n  user: {{token: t}}\n"
        ))
        .expect("kubeconfig")
    }

    /// A message names the server, never a user or password written into its URL.
    #[test]
    fn the_server_is_named_without_its_credentials() {
        for (written, shown) in [
            ("https://10.0.0.1:6443", "https://10.0.0.1:6443"),
            (
                "https://admin:s3cret@10.0.0.1:6443/k8s",
                "https://10.0.0.1:6443/k8s",
            ),
            ("http://127.0.0.1:8080/", "http://127.0.0.1:8080/"),
        ] {
            assert_eq!(server_of(&kubeconfig(written)).as_deref(), Some(shown));
        }
        let mut none = kubeconfig("https://h");
        none.current_context = None;
        assert_eq!(server_of(&none), None);
    }
}
