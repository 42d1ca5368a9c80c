//! An Argo CD cluster Secret made a cluster source.
//!
//! Argo CD keeps one Secret per cluster (argoproj/argo-cd, docs/operator-manual/
//! declarative-setup.md): the keys `name`, `server` and `config`, the last a JSON object with
//! the credentials. Each is turned into the kubeconfig a file in `clusters_dir` would hold
//! for the same cluster, so the client, health checks, watches and cursors downstream are the
//! same as for a file, and a change of the credentials (a new kubeconfig, so a new hash) is
//! what restarts the cluster — a Secret whose labels or annotations changed is not.
//!
//! Read from `config`: `bearerToken`; `username` and `password`; `tlsClientConfig` with
//! `caData`, `certData`, `keyData` (base64 PEM, as Argo CD writes them), `serverName` and
//! `insecure`; `proxyUrl`; and `execProviderConfig` (`command`, `args`, `env`, `apiVersion`,
//! `installHint`), which becomes the kubeconfig user's exec plugin, run by the client as for a
//! kubeconfig file, never interactively. `awsAuthConfig` is refused as not supported yet;
//! other keys (`disableCompression`, …) are ignored.
//!
//! Errors name the Secret's key and the field, never a value of `config`: serde's own message
//! quotes the value it could not take, which may be the token, so only its place is said.

use std::collections::BTreeMap;
use std::sync::Arc;

use kube::config::Kubeconfig;
use serde::Deserialize;
use serde_json::json;

use super::files::sha256_hex;
use super::inventory::origin;
use super::sources::{ClusterSource, validate_cluster_name};

/// Why a Secret is not a cluster; the message names the key and field at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArgoSecretError {
    #[error("data.{0}: missing")]
    Missing(&'static str),
    #[error("data.{0}: not base64")]
    NotBase64(&'static str),
    #[error("data.{0}: not UTF-8 text")]
    NotText(&'static str),
    #[error(
        "data.name: `{0}` cannot name a cluster (1-63 characters of a-z, 0-9, `-`, `_`: it is \
         the cluster's name in events and metrics)"
    )]
    Name(String),
    #[error("data.config: not JSON (line {line}, column {column})")]
    ConfigSyntax { line: usize, column: usize },
    #[error(
        "data.config: `{path}` is not what Argo CD writes there (line {line}, column {column})"
    )]
    ConfigField {
        path: String,
        line: usize,
        column: usize,
    },
    #[error("data.config.{0}: not supported by jobrelay yet; give a bearerToken instead")]
    Unsupported(&'static str),
    #[error(
        "data.config: no credentials (bearerToken, username and password, \
         tlsClientConfig.certData and keyData, or execProviderConfig)"
    )]
    NoCredentials,
    #[error("data.config.tlsClientConfig: certData and keyData go together")]
    HalfACertificate,
    #[error("the client configuration made of it is refused: {0}")]
    Client(String),
}

/// `config` as Argo CD writes it; unknown keys are ignored (Argo CD adds some over time).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ArgoConfig {
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
    #[serde(default)]
    bearer_token: Option<String>,
    #[serde(default)]
    tls_client_config: TlsClientConfig,
    #[serde(default)]
    exec_provider_config: Option<ExecProviderConfig>,
    #[serde(default)]
    aws_auth_config: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    proxy_url: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct TlsClientConfig {
    #[serde(default)]
    insecure: bool,
    #[serde(default)]
    server_name: Option<String>,
    #[serde(default)]
    ca_data: Option<String>,
    #[serde(default)]
    cert_data: Option<String>,
    #[serde(default)]
    key_data: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ExecProviderConfig {
    command: String,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    api_version: Option<String>,
    #[serde(default)]
    install_hint: Option<String>,
}

/// The cluster an Argo CD cluster Secret describes. `key` is the Secret's `namespace/name`;
/// `data` its `data` as the API returns it (values base64).
pub fn parse(
    key: &str,
    data: &serde_json::Map<String, serde_json::Value>,
) -> Result<ClusterSource, ArgoSecretError> {
    let name = text(data, "name")?;
    if validate_cluster_name(&name).is_err() {
        return Err(ArgoSecretError::Name(name));
    }
    let server = text(data, "server")?;
    if server.trim().is_empty() {
        return Err(ArgoSecretError::Missing("server"));
    }
    let config = text(data, "config")?;
    let config = read_config(&config)?;
    let kubeconfig = kubeconfig_of(&name, server.trim(), config)?;
    let text = kubeconfig.to_string();
    let kubeconfig =
        Kubeconfig::from_yaml(&text).map_err(|e| ArgoSecretError::Client(e.to_string()))?;
    // As for a file: one that cannot work is refused here, so it never replaces a good one.
    kube::Config::try_from(kubeconfig.clone())
        .map_err(|e| ArgoSecretError::Client(e.to_string()))?;
    Ok(ClusterSource {
        name,
        path: origin(key),
        sha256: sha256_hex(text.as_bytes()),
        kubeconfig: Arc::new(kubeconfig),
    })
}

/// The value of `key`, base64-decoded, as text.
fn text(
    data: &serde_json::Map<String, serde_json::Value>,
    key: &'static str,
) -> Result<String, ArgoSecretError> {
    use base64::Engine as _;
    let encoded = data
        .get(key)
        .and_then(|v| v.as_str())
        .ok_or(ArgoSecretError::Missing(key))?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .map_err(|_| ArgoSecretError::NotBase64(key))?;
    String::from_utf8(bytes).map_err(|_| ArgoSecretError::NotText(key))
}

fn read_config(text: &str) -> Result<ArgoConfig, ArgoSecretError> {
    let mut de = serde_json::Deserializer::from_str(text);
    let config: ArgoConfig = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.inner();
        let (line, column) = (inner.line(), inner.column());
        if inner.is_data() {
            ArgoSecretError::ConfigField { path, line, column }
        } else {
            ArgoSecretError::ConfigSyntax { line, column }
        }
    })?;
    de.end().map_err(|e| ArgoSecretError::ConfigSyntax {
        line: e.line(),
        column: e.column(),
    })?;
    Ok(config)
}

/// The kubeconfig (as JSON) of one cluster, one user and one context, all named `name`.
fn kubeconfig_of(
    name: &str,
    server: &str,
    config: ArgoConfig,
) -> Result<serde_json::Value, ArgoSecretError> {
    if config.aws_auth_config.is_some() {
        return Err(ArgoSecretError::Unsupported("awsAuthConfig"));
    }
    let tls = config.tls_client_config;
    let mut cluster = json!({ "server": server });
    if let Some(ca) = non_empty(tls.ca_data) {
        cluster["certificate-authority-data"] = json!(ca);
    }
    if tls.insecure {
        cluster["insecure-skip-tls-verify"] = json!(true);
    }
    if let Some(server_name) = non_empty(tls.server_name) {
        cluster["tls-server-name"] = json!(server_name);
    }
    if let Some(proxy) = non_empty(config.proxy_url) {
        cluster["proxy-url"] = json!(proxy);
    }
    let mut user = json!({});
    let mut credentials = false;
    if let Some(token) = non_empty(config.bearer_token) {
        user["token"] = json!(token);
        credentials = true;
    }
    if let (Some(username), Some(password)) =
        (non_empty(config.username), non_empty(config.password))
    {
        user["username"] = json!(username);
        user["password"] = json!(password);
        credentials = true;
    }
    match (non_empty(tls.cert_data), non_empty(tls.key_data)) {
        (Some(cert), Some(key)) => {
            user["client-certificate-data"] = json!(cert);
            user["client-key-data"] = json!(key);
            credentials = true;
        }
        (None, None) => {}
        _ => return Err(ArgoSecretError::HalfACertificate),
    }
    if let Some(exec) = config.exec_provider_config {
        let env: Vec<serde_json::Value> = exec
            .env
            .iter()
            .map(|(name, value)| json!({ "name": name, "value": value }))
            .collect();
        let mut plugin = json!({
            "command": exec.command,
            "args": exec.args,
            "env": env,
            "apiVersion": exec
                .api_version
                .unwrap_or_else(|| "client.authentication.k8s.io/v1beta1".into()),
            "interactiveMode": "Never",
        });
        if let Some(hint) = exec.install_hint {
            plugin["installHint"] = json!(hint);
        }
        user["exec"] = plugin;
        credentials = true;
    }
    if !credentials {
        return Err(ArgoSecretError::NoCredentials);
    }
    Ok(json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{ "name": name, "cluster": cluster }],
        "users": [{ "name": name, "user": user }],
        "contexts": [{ "name": name, "context": { "cluster": name, "user": name } }],
        "current-context": name,
    }))
}

fn non_empty(value: Option<String>) -> Option<String> {
    value.filter(|v| !v.trim().is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;
    use secrecy::ExposeSecret as _;
    use std::path::PathBuf;

    fn b64(text: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(text)
    }

    fn data(name: &str, server: &str, config: &str) -> serde_json::Map<String, serde_json::Value> {
        let mut map = serde_json::Map::new();
        map.insert("name".into(), json!(b64(name)));
        map.insert("server".into(), json!(b64(server)));
        map.insert("config".into(), json!(b64(config)));
        map
    }

    fn user(source: &ClusterSource) -> &kube::config::AuthInfo {
        source.kubeconfig.auth_infos[0]
            .auth_info
            .as_ref()
            .expect("a user")
    }

    #[test]
    fn a_token_and_tls_become_the_kubeconfig_a_file_would_hold() {
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = rcgen::CertificateParams::new(vec!["api.prod".to_string()])
            .expect("params")
            .self_signed(&key)
            .expect("certificate");
        let ca = b64(&cert.pem());
        let config = format!(
            r#"{{"bearerToken":"s3cr3t-token","tlsClientConfig":{{"caData":"{ca}",
            "serverName":"api.prod","insecure":false}},"disableCompression":true}}"#
        );
        let source = parse(
            "argocd/prod",
            &data("prod-eu", "https://10.0.0.1:6443", &config),
        )
        .expect("a cluster");
        assert_eq!(source.name, "prod-eu");
        assert_eq!(source.path, PathBuf::from("secret argocd/prod"));
        let user = user(&source);
        assert_eq!(
            user.token.as_ref().map(|t| t.expose_secret().to_string()),
            Some("s3cr3t-token".into())
        );
        let cluster = source.kubeconfig.clusters[0]
            .cluster
            .as_ref()
            .expect("cluster");
        assert_eq!(cluster.server.as_deref(), Some("https://10.0.0.1:6443"));
        assert_eq!(cluster.certificate_authority_data.as_deref(), Some(&*ca));
        assert_eq!(cluster.tls_server_name.as_deref(), Some("api.prod"));
        assert_eq!(
            source.kubeconfig.current_context.as_deref(),
            Some("prod-eu")
        );

        // The same credentials are the same source; another token is a change.
        let again = parse(
            "argocd/prod",
            &data("prod-eu", "https://10.0.0.1:6443", &config),
        )
        .expect("a cluster");
        assert_eq!(again.sha256, source.sha256);
        let rotated = config.replace("s3cr3t-token", "n3w-token");
        let rotated = parse(
            "argocd/prod",
            &data("prod-eu", "https://10.0.0.1:6443", &rotated),
        )
        .expect("a cluster");
        assert_ne!(rotated.sha256, source.sha256);
    }

    #[test]
    fn an_exec_provider_becomes_the_users_exec_plugin() {
        let config = r#"{"execProviderConfig":{"command":"argocd-k8s-auth","args":["gcp"],
            "env":{"REGION":"eu"},"apiVersion":"client.authentication.k8s.io/v1beta1"}}"#;
        let source = parse(
            "argocd/gke",
            &data("gke", "https://gke.example:443", config),
        )
        .expect("a cluster");
        let exec = user(&source).exec.as_ref().expect("an exec plugin");
        assert_eq!(exec.command.as_deref(), Some("argocd-k8s-auth"));
        assert_eq!(exec.args.as_deref(), Some(&["gcp".to_string()][..]));
        let env = exec.env.as_ref().expect("env");
        assert_eq!(env[0].get("name").map(String::as_str), Some("REGION"));
        assert_eq!(env[0].get("value").map(String::as_str), Some("eu"));
    }

    #[test]
    fn what_cannot_work_is_refused_naming_the_field_never_the_token() {
        let token = "tok-9f8e7d6c5b4a";
        let cases: Vec<(serde_json::Map<String, serde_json::Value>, &str)> = vec![
            (data("Prod!", "https://a", "{}"), "data.name: `Prod!`"),
            (data("p", " ", "{}"), "data.server: missing"),
            (data("p", "https://a", "{}"), "no credentials"),
            (
                data("p", "https://a", &format!(r#"{{"bearerToken":"{token}""#)),
                "data.config: not JSON",
            ),
            (
                data(
                    "p",
                    "https://a",
                    &format!(r#"{{"tlsClientConfig":"{token}","bearerToken":"{token}"}}"#),
                ),
                "`tlsClientConfig`",
            ),
            (
                data(
                    "p",
                    "https://a",
                    r#"{"awsAuthConfig":{"clusterName":"eks"},"bearerToken":"x"}"#,
                ),
                "data.config.awsAuthConfig: not supported",
            ),
            (
                data(
                    "p",
                    "https://a",
                    r#"{"bearerToken":"x","tlsClientConfig":{"certData":"AAAA"}}"#,
                ),
                "certData and keyData go together",
            ),
            (
                data(
                    "p",
                    "https://a",
                    &format!(r#"{{"bearerToken":"{token}","tlsClientConfig":{{"caData":"%%%"}}}}"#),
                ),
                "client configuration",
            ),
        ];
        for (data, said) in cases {
            let e = parse("argocd/p", &data).expect_err(said).to_string();
            assert!(e.contains(said), "{e} should say {said}");
            assert!(!e.contains(token), "{e} shows the token");
        }
        let mut missing = data("p", "https://a", "{}");
        missing.remove("config");
        let e = parse("argocd/p", &missing).expect_err("no config");
        assert_eq!(e, ArgoSecretError::Missing("config"));
        missing.insert("config".into(), json!("not base64!"));
        let e = parse("argocd/p", &missing).expect_err("not base64");
        assert_eq!(e, ArgoSecretError::NotBase64("config"));
    }
}
