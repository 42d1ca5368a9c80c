//! `home_cluster:` — watching the cluster jobrelay runs in with the pod's service account,
//! without a kubeconfig file.
//!
//! The cluster becomes one more cluster source, named as configured, whose kubeconfig is made
//! from the files Kubernetes mounts into every pod: the token file is named rather than read,
//! so the client re-reads it as Kubernetes rotates it, exactly as kube-rs's in-cluster config
//! does.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use kube::config::Kubeconfig;
use serde_json::json;
use sha2::{Digest, Sha256};

use super::ConfigError;
use super::main_file::HomeCluster;
use super::sources::{ClusterSource, validate_cluster_name};

/// Why the home cluster cannot be watched; the message names the field or file at fault.
#[derive(Debug, thiserror::Error)]
pub enum HomeClusterError {
    #[error("home_cluster.name: {0}")]
    Name(ConfigError),
    #[error(
        "home_cluster: KUBERNETES_SERVICE_HOST is not set (not running in a pod?) and no \
         `server` is given"
    )]
    NoServer,
    #[error("home_cluster: no service account token at {} (is the token mounted?)", .0.display())]
    NoToken(PathBuf),
    #[error("home_cluster: {0}")]
    Kubeconfig(kube::config::KubeconfigError),
}

impl HomeCluster {
    /// The home cluster as a cluster source. Errors name the field or file that is missing.
    pub fn source(&self) -> Result<ClusterSource, HomeClusterError> {
        validate_cluster_name(&self.name).map_err(HomeClusterError::Name)?;
        let server = match &self.server {
            Some(server) => server.clone(),
            None => server_from_env().ok_or(HomeClusterError::NoServer)?,
        };
        let token = self.service_account_dir.join("token");
        if !token.is_file() {
            return Err(HomeClusterError::NoToken(token));
        }
        let ca = self.service_account_dir.join("ca.crt");
        let mut cluster = json!({ "server": server });
        if ca.is_file() {
            cluster["certificate-authority"] = json!(path_text(&ca));
        }
        let text = json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{ "name": self.name, "cluster": cluster }],
            "users": [{ "name": "service-account", "user": { "tokenFile": path_text(&token) } }],
            "contexts": [{
                "name": self.name,
                "context": { "cluster": self.name, "user": "service-account" }
            }],
            "current-context": self.name,
        })
        .to_string();
        let kubeconfig = Kubeconfig::from_yaml(&text).map_err(HomeClusterError::Kubeconfig)?;
        Ok(ClusterSource {
            name: self.name.clone(),
            path: self.service_account_dir.clone(),
            sha256: hex::encode(Sha256::digest(text.as_bytes())),
            kubeconfig: Arc::new(kubeconfig),
        })
    }
}

fn path_text(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

fn server_from_env() -> Option<String> {
    let host = std::env::var("KUBERNETES_SERVICE_HOST").ok()?;
    let port = std::env::var("KUBERNETES_SERVICE_PORT").unwrap_or_else(|_| "443".into());
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host
    };
    Some(format!("https://{host}:{port}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_from_the_service_account_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let home = HomeCluster {
            name: "home".into(),
            server: Some("https://10.0.0.1:443".into()),
            service_account_dir: dir.path().to_path_buf(),
        };
        let e = home.source().unwrap_err().to_string();
        assert!(e.contains("no service account token at"), "{e}");
        std::fs::write(dir.path().join("token"), "t0k3n").expect("token");
        std::fs::write(dir.path().join("ca.crt"), "not read here").expect("ca");
        let source = home.source().expect("source");
        assert_eq!(source.name, "home");
        let user = source.kubeconfig.auth_infos[0]
            .auth_info
            .as_ref()
            .expect("user");
        assert_eq!(
            user.token_file.as_deref(),
            Some(dir.path().join("token").to_string_lossy().as_ref())
        );
        assert!(user.token.is_none(), "the token is named, never copied");
        let cluster = source.kubeconfig.clusters[0]
            .cluster
            .as_ref()
            .expect("cluster");
        assert_eq!(cluster.server.as_deref(), Some("https://10.0.0.1:443"));
        assert!(cluster.certificate_authority.is_some());

        let bad = HomeCluster {
            name: "Home!".into(),
            ..home
        };
        assert!(
            bad.source()
                .unwrap_err()
                .to_string()
                .starts_with("home_cluster.name")
        );
    }
}
