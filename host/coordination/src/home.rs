//! The home cluster: where jobrelay itself runs, and where its Leases live.
//!
//! In a pod the home cluster needs no kubeconfig file: the service account's token and CA,
//! mounted by Kubernetes, are the credentials, and its namespace is the Lease's default
//! namespace. A kubeconfig file can be named instead (tests, or a daemon run outside the
//! cluster it elects on).

use std::path::PathBuf;

use kube::config::{KubeConfigOptions, Kubeconfig};

use super::settings::CoordinationSettings;

/// A client for the home cluster and the namespace its Leases go in.
pub struct Home {
    /// A client with the home cluster's credentials, for the Leases.
    pub client: kube::Client,
    /// Where the Leases live: `coordination.namespace`, else the pod's own (`POD_NAMESPACE`),
    /// else the credentials' default namespace.
    pub namespace: String,
    /// This replica's name in the Leases.
    pub identity: String,
}

/// Why the home cluster cannot be reached: which credentials failed, the cause beneath.
#[derive(Debug, thiserror::Error)]
pub enum HomeError {
    /// The kubeconfig named by `coordination.kubeconfig` cannot be read or used.
    #[error("coordination.kubeconfig {}", path.display())]
    Kubeconfig {
        /// The file as configured.
        path: PathBuf,
        /// What reading or using it failed on.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// No kubeconfig was named and the pod has no service account to use.
    #[error("coordination: no `kubeconfig` given and no in-cluster service account available")]
    InCluster {
        /// What is missing or unreadable: the API server's address in the environment, the
        /// token or the CA file.
        #[source]
        source: kube::config::InClusterError,
    },
    /// The credentials were read, but a client could not be built from them.
    #[error("coordination: cannot build a client for the home cluster")]
    Client {
        /// What kube could not set up from them (TLS, a proxy, an auth method).
        #[source]
        source: kube::Error,
    },
}

/// Connects to the home cluster as the settings say. Errors say which credentials failed.
pub async fn connect(settings: &CoordinationSettings) -> Result<Home, HomeError> {
    let mut config = match &settings.kubeconfig {
        Some(path) => {
            let failed = |source| HomeError::Kubeconfig {
                path: path.clone(),
                source,
            };
            let kubeconfig = Kubeconfig::read_from(path).map_err(failed)?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .map_err(failed)?
        }
        None => kube::Config::incluster().map_err(|source| HomeError::InCluster { source })?,
    };
    // A renewal must fail fast and visibly: the elector has its own deadline and retries.
    config.default_retry = false;
    let namespace = settings
        .namespace
        .clone()
        .or_else(|| non_empty_env("POD_NAMESPACE"))
        .unwrap_or_else(|| config.default_namespace.clone());
    let client = kube::Client::try_from(config).map_err(|source| HomeError::Client { source })?;
    Ok(Home {
        client,
        namespace,
        identity: identity(settings),
    })
}

/// What [`connect`] reads, read and checked without building a client, so it needs no
/// runtime and makes no request: the kubeconfig `coordination.kubeconfig` names (read, its
/// current context made a client configuration), else the pod's in-cluster service account.
/// Nothing to check in `single` mode, which reaches no home cluster. For a running daemon's
/// edit of the section: what the next start would refuse here is refused at once.
pub fn check(settings: &CoordinationSettings) -> Result<(), HomeError> {
    if settings.mode == super::settings::Mode::Single {
        return Ok(());
    }
    match &settings.kubeconfig {
        Some(path) => {
            let failed = |source| HomeError::Kubeconfig {
                path: path.clone(),
                source,
            };
            let kubeconfig = Kubeconfig::read_from(path).map_err(failed)?;
            kube::Config::try_from(kubeconfig).map_err(failed)?;
        }
        None => {
            kube::Config::incluster().map_err(|source| HomeError::InCluster { source })?;
        }
    }
    Ok(())
}

/// `identity`, else `POD_NAME` (set from the downward API by the chart), else the host name
/// with the process id, which tells two processes on one machine apart.
fn identity(settings: &CoordinationSettings) -> String {
    if let Some(identity) = &settings.identity {
        return identity.clone();
    }
    if let Some(pod) = non_empty_env("POD_NAME") {
        return pod;
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| non_empty_env("HOSTNAME"))
        .unwrap_or_else(|| "jobrelay".to_string());
    format!("{host}-{}", std::process::id())
}

fn non_empty_env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The check a live edit gets refuses what `connect` refuses, without a runtime: a
    /// kubeconfig that is not there, named with its setting; `single` reaches nothing.
    #[test]
    fn the_check_refuses_a_missing_kubeconfig_and_passes_single_mode() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = dir.path().join("home.kubeconfig");
        let mut settings = CoordinationSettings {
            kubeconfig: Some(missing.clone()),
            ..CoordinationSettings::default()
        };
        check(&settings).expect("single mode reaches no home cluster");
        settings.mode = crate::settings::Mode::Leader;
        let error = check(&settings).expect_err("no kubeconfig there");
        assert!(matches!(&error, HomeError::Kubeconfig { path, .. } if *path == missing));
        std::fs::write(
            &missing,
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: \
             https://10.0.0.1:6443\ncontexts:\n- name: c\n  context:\n    cluster: c\n    \
             user: u\ncurrent-context: c\nusers:\n- name: u\n  user:\n    token: t\n",
        )
        .expect("kubeconfig");
        check(&settings).expect("a kubeconfig that works");
    }

    /// A kubeconfig that cannot be read names the setting and its path, and keeps the reason
    /// beneath as the error's source, so the daemon's fatal line shows both.
    #[tokio::test]
    async fn a_missing_kubeconfig_names_the_setting_and_keeps_the_cause() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = dir.path().join("home.kubeconfig");
        let settings = CoordinationSettings {
            kubeconfig: Some(missing.clone()),
            ..CoordinationSettings::default()
        };
        let Err(error) = connect(&settings).await else {
            panic!("connected without a kubeconfig");
        };
        assert!(matches!(&error, HomeError::Kubeconfig { path, .. } if *path == missing));
        assert!(
            error.to_string().starts_with("coordination.kubeconfig "),
            "{error}"
        );
        assert!(
            std::error::Error::source(&error).is_some(),
            "the cause is kept: {error:?}"
        );
    }
}
