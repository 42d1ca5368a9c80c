//! The home cluster: where jobrelay itself runs, and where its Leases live.
//!
//! In a pod the home cluster needs no kubeconfig file: the service account's token and CA,
//! mounted by Kubernetes, are the credentials, and its namespace is the Lease's default
//! namespace. A kubeconfig file can be named instead (tests, or a daemon run outside the
//! cluster it elects on).

use kube::config::{KubeConfigOptions, Kubeconfig};

use super::settings::CoordinationSettings;

/// A client for the home cluster and the namespace its Leases go in.
pub struct Home {
    pub client: kube::Client,
    pub namespace: String,
    /// This replica's name in the Leases.
    pub identity: String,
}

/// Connects to the home cluster as the settings say. Errors say which credentials failed.
pub async fn connect(settings: &CoordinationSettings) -> Result<Home, String> {
    let mut config = match &settings.kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .map_err(|e| format!("coordination.kubeconfig {}: {e}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .map_err(|e| format!("coordination.kubeconfig {}: {e}", path.display()))?
        }
        None => kube::Config::incluster().map_err(|e| {
            format!(
                "coordination: no `kubeconfig` given and no in-cluster service account \
                 available ({e})"
            )
        })?,
    };
    // A renewal must fail fast and visibly: the elector has its own deadline and retries.
    config.default_retry = false;
    let namespace = settings
        .namespace
        .clone()
        .or_else(|| non_empty_env("POD_NAMESPACE"))
        .unwrap_or_else(|| config.default_namespace.clone());
    let client = kube::Client::try_from(config)
        .map_err(|e| format!("coordination: cannot build a client for the home cluster: {e}"))?;
    Ok(Home {
        client,
        namespace,
        identity: identity(settings),
    })
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
