//! The access-provider file of the ClusterProfile source (`cluster_sources.cluster_profile.
//! access_providers`): which credential plugins this consumer has, by name.
//!
//! A ClusterProfile says how its cluster is reached (`status.accessProviders[]`: a provider's
//! name and the cluster's server and CA) but never carries a credential; the consumer keeps,
//! apart, a file naming the providers it can use, each with the exec plugin that yields the
//! credential (kubernetes-sigs/cluster-inventory-api, pkg/access; the `--clusterprofile-
//! provider-file` of its consumers). Its shape, JSON or YAML:
//!
//! ```json
//! {"providers": [{"name": "secretreader", "execConfig": {
//!     "apiVersion": "client.authentication.k8s.io/v1", "command": "/plugins/secretreader",
//!     "args": [], "env": [{"name": "K", "value": "V"}], "provideClusterInfo": true}}]}
//! ```
//!
//! Read when the main file is (at start and at each of its edits): an edit of this file alone
//! takes effect at the main file's next edit or the next start. Upstream's per-profile
//! additions (`profileSourcedCLIArgsPolicy`, `profileSourcedEnvVarsPolicy`, the cluster
//! extensions `…/exec/additional-args|additional-envs`) are not applied: the plugin runs with
//! the file's args and env only. Errors name the file and the provider, never an env value
//! (a plugin's env may hold a secret).

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

/// The exec API version a provider gets when its `execConfig` names none.
pub const EXEC_API_VERSION: &str = "client.authentication.k8s.io/v1";

/// One provider's exec plugin, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderExec {
    pub api_version: String,
    pub command: String,
    pub args: Vec<String>,
    /// `(name, value)`: the value may be a secret, so it is never shown.
    pub env: Vec<(String, String)>,
    /// Whether the plugin is given the cluster (server, CA) in `KUBERNETES_EXEC_INFO`.
    pub provide_cluster_info: bool,
    /// `Never` unless the file says otherwise: a daemon has no terminal to prompt on.
    pub interactive_mode: String,
}

/// The providers of the file, by name.
pub type AccessProviders = BTreeMap<String, ProviderExec>;

#[derive(Deserialize)]
struct FileRaw {
    providers: Vec<ProviderRaw>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ProviderRaw {
    #[serde(default)]
    name: String,
    exec_config: Option<ExecRaw>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ExecRaw {
    api_version: Option<String>,
    #[serde(default)]
    command: String,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: Vec<EnvRaw>,
    #[serde(default)]
    provide_cluster_info: bool,
    interactive_mode: Option<String>,
}

#[derive(Deserialize)]
struct EnvRaw {
    name: String,
    value: String,
}

/// Why the file is refused; the message names the file, never a value in it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AccessProvidersError {
    #[error("{path}: cannot be read: {why}")]
    Read { path: String, why: String },
    #[error(
        "{path}: not an access-provider file ({place}; expected {{providers: [{{name, execConfig}}]}})"
    )]
    Syntax { path: String, place: String },
    #[error("{path}: providers[{index}].name: missing")]
    NoName { path: String, index: usize },
    #[error("{path}: providers: `{name}` is named twice")]
    Duplicate { path: String, name: String },
    #[error(
        "{path}: providers[name={name}].execConfig: missing (the plugin that gives the credential)"
    )]
    NoExec { path: String, name: String },
    #[error("{path}: providers[name={name}].execConfig.command: missing")]
    NoCommand { path: String, name: String },
    #[error(
        "{path}: providers[name={name}].execConfig.interactiveMode: `{mode}` is none of Never, \
         IfAvailable, Always"
    )]
    InteractiveMode {
        path: String,
        name: String,
        mode: String,
    },
}

/// Reads and checks the file at `path`.
pub fn read(path: &Path) -> Result<AccessProviders, AccessProvidersError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| AccessProvidersError::Read {
        path: shown.clone(),
        why: e.to_string(),
    })?;
    parse(&shown, &text)
}

/// Checks the file's text; `path` is how the errors name it.
pub fn parse(path: &str, text: &str) -> Result<AccessProviders, AccessProvidersError> {
    let path = path.to_string();
    let de = serde_yaml_ng::Deserializer::from_str(text);
    let raw: FileRaw = serde_path_to_error::deserialize(de).map_err(|e| {
        let at = e.path().to_string();
        let mut place = match e.inner().location() {
            Some(l) => format!("line {}, column {}", l.line(), l.column()),
            None => "not YAML or JSON".to_string(),
        };
        if at != "." {
            place = format!("`{at}`, {place}");
        }
        AccessProvidersError::Syntax {
            path: path.clone(),
            place,
        }
    })?;
    let mut out = AccessProviders::new();
    for (index, provider) in raw.providers.into_iter().enumerate() {
        let name = provider.name.trim().to_string();
        if name.is_empty() {
            return Err(AccessProvidersError::NoName { path, index });
        }
        if out.contains_key(&name) {
            return Err(AccessProvidersError::Duplicate { path, name });
        }
        let Some(exec) = provider.exec_config else {
            return Err(AccessProvidersError::NoExec { path, name });
        };
        if exec.command.trim().is_empty() {
            return Err(AccessProvidersError::NoCommand { path, name });
        }
        let mode = exec.interactive_mode.unwrap_or_else(|| "Never".to_string());
        if !["Never", "IfAvailable", "Always"].contains(&mode.as_str()) {
            return Err(AccessProvidersError::InteractiveMode { path, name, mode });
        }
        let checked = ProviderExec {
            api_version: exec
                .api_version
                .unwrap_or_else(|| EXEC_API_VERSION.to_string()),
            command: exec.command,
            args: exec.args,
            env: exec.env.into_iter().map(|e| (e.name, e.value)).collect(),
            provide_cluster_info: exec.provide_cluster_info,
            interactive_mode: mode,
        };
        out.insert(name, checked);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_upstream_json_shape_and_yaml_are_read() {
        let json = r#"{"providers":[{"name":"secretreader","execConfig":{
            "apiVersion":"client.authentication.k8s.io/v1","command":"/bin/reader",
            "args":["--x"],"env":[{"name":"K","value":"leaky-env-secret"}],
            "provideClusterInfo":true},"profileSourcedCLIArgsPolicy":"Append"}]}"#;
        let providers = parse("p.json", json).expect("valid");
        let reader = &providers["secretreader"];
        assert_eq!(reader.command, "/bin/reader");
        assert_eq!(reader.args, ["--x"]);
        assert!(reader.provide_cluster_info);
        assert_eq!(reader.interactive_mode, "Never");
        let yaml = "providers:\n- name: a\n  execConfig: {command: /bin/a}\n";
        let a = &parse("p.yaml", yaml).expect("valid")["a"];
        assert_eq!(a.api_version, EXEC_API_VERSION);
        assert!(!a.provide_cluster_info);
    }

    #[test]
    fn a_bad_file_is_refused_naming_the_file_and_provider_never_a_value() {
        let cases = [
            (
                "{providers: 3}",
                "p.yaml: not an access-provider file (`providers`",
            ),
            (
                "providers:\n- execConfig: {command: x}\n",
                "p.yaml: providers[0].name: missing",
            ),
            (
                "providers:\n- {name: a, execConfig: {command: x}}\n- {name: a, execConfig: {command: y}}\n",
                "p.yaml: providers: `a` is named twice",
            ),
            (
                "providers:\n- {name: a}\n",
                "p.yaml: providers[name=a].execConfig: missing",
            ),
            (
                "providers:\n- {name: a, execConfig: {env: [{name: K, value: leaky-env-secret}]}}\n",
                "p.yaml: providers[name=a].execConfig.command: missing",
            ),
            (
                "providers:\n- {name: a, execConfig: {command: x, interactiveMode: Sometimes}}\n",
                "p.yaml: providers[name=a].execConfig.interactiveMode: `Sometimes`",
            ),
            (
                "providers:\n- {name: a, execConfig: {command: x, env: [{name: K, value: [leaky-env-secret]}]}}\n",
                "p.yaml: not an access-provider file (",
            ),
        ];
        for (text, expected) in cases {
            let why = parse("p.yaml", text).expect_err(expected).to_string();
            assert!(why.starts_with(expected), "{why:?} is not {expected:?}");
            assert!(!why.contains("leaky-env-secret"), "{why}");
        }
        let why = read(Path::new("/nonexistent/providers.json"))
            .expect_err("missing")
            .to_string();
        assert!(
            why.starts_with("/nonexistent/providers.json: cannot be read"),
            "{why}"
        );
    }
}
