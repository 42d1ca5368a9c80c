//! The `coordination:` section of the main file: whether replicas elect one that delivers.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How this process shares the work with other replicas.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// The only replica: it delivers everything, no Lease is used.
    #[default]
    Single,
    /// Replicas elect one leader through a Lease on the home cluster; only the leader watches
    /// and delivers, the others wait with their plugins compiled.
    Leader,
    /// Clusters are spread over the replicas by rendezvous hashing, one Lease per cluster; each
    /// replica watches and delivers the clusters whose Leases it holds.
    Sharded,
}

impl Mode {
    /// The name the main file gives the mode.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Single => "single",
            Mode::Leader => "leader",
            Mode::Sharded => "sharded",
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// ```yaml
/// coordination:
///   mode: leader
///   lease_name: jobrelay          # in `namespace` of the home cluster
///   namespace: jobrelay           # default: the pod's own namespace
///   kubeconfig: home.kubeconfig   # default: the pod's service account (in-cluster)
///   lease_duration_seconds: 15
///   renew_deadline_seconds: 10
///   retry_period_seconds: 2
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "snake_case", deny_unknown_fields)]
pub struct CoordinationSettings {
    /// Whether replicas share the work, and how; `single` needs none of the other fields.
    pub mode: Mode,
    /// Name of the Lease object; with `sharded`, the prefix of the member and cluster Leases
    /// (`<lease_name>-member-<identity>`, `<lease_name>-cluster-<cluster>`).
    pub lease_name: String,
    /// Namespace of the Lease. Default: `POD_NAMESPACE`, else the service account's namespace,
    /// else the kubeconfig's.
    pub namespace: Option<String>,
    /// Kubeconfig of the home cluster (relative: against the config folder). Without it the
    /// pod's service account is used, so the home cluster needs no kubeconfig file.
    pub kubeconfig: Option<PathBuf>,
    /// This replica's name in the Lease. Default: `POD_NAME`, else host name and process id.
    pub identity: Option<String>,
    /// How long a Lease not renewed keeps others out. A follower takes over this long after
    /// it last saw the Lease change.
    pub lease_duration_seconds: u32,
    /// The leader stops delivering if it could not renew for this long. Shorter than the
    /// lease duration, so it has stopped before anyone else may start; the difference is the
    /// margin for clocks that run at different speeds.
    pub renew_deadline_seconds: u32,
    /// How often the leader renews and followers try to acquire.
    pub retry_period_seconds: u32,
}

impl Default for CoordinationSettings {
    fn default() -> Self {
        CoordinationSettings {
            mode: Mode::Single,
            lease_name: "jobrelay".to_string(),
            namespace: None,
            kubeconfig: None,
            identity: None,
            lease_duration_seconds: 15,
            renew_deadline_seconds: 10,
            retry_period_seconds: 2,
        }
    }
}

/// A `coordination:` field the host cannot use; the text names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    /// The Lease name as written is not a Kubernetes object name.
    #[error(
        "coordination.lease_name: `{0}` is not a valid object name (lowercase letters, \
         digits, '-' and '.', at most 253 characters)"
    )]
    LeaseName(String),
    /// The namespace as written is not a Kubernetes object name.
    #[error("coordination.namespace: `{0}` is not a valid namespace")]
    Namespace(String),
    /// `identity` is set to blank text, which would make every such replica the same holder.
    #[error("coordination.identity: must not be empty")]
    EmptyIdentity,
    /// The three durations, in seconds, out of their order.
    #[error(
        "coordination: needs 0 < retry_period_seconds ({retry}) < \
         renew_deadline_seconds ({deadline}) < lease_duration_seconds ({lease})"
    )]
    Timings {
        /// `retry_period_seconds`.
        retry: u32,
        /// `renew_deadline_seconds`.
        deadline: u32,
        /// `lease_duration_seconds`.
        lease: u32,
    },
}

/// The timings of an election, checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timings {
    /// How long a Lease not renewed keeps other replicas out.
    pub lease_duration: Duration,
    /// How long a holder may fail to renew before it must stop delivering.
    pub renew_deadline: Duration,
    /// The pause between attempts to take or renew (see [`Timings::next_attempt`]).
    pub retry_period: Duration,
}

impl Timings {
    /// The wait before the next attempt: the retry period plus up to a fifth more, so replicas
    /// started together do not all write at once whenever a Lease frees up.
    pub fn next_attempt(&self) -> Duration {
        self.retry_period + self.retry_period.mul_f64(fastrand::f64() * 0.2)
    }
}

impl CoordinationSettings {
    /// Checks the section and resolves a relative kubeconfig against `root`. Errors name the
    /// field.
    pub fn resolve(mut self, root: &Path) -> Result<CoordinationSettings, SettingsError> {
        if !is_dns_label_like(&self.lease_name) {
            return Err(SettingsError::LeaseName(self.lease_name));
        }
        if let Some(ns) = &self.namespace
            && !is_dns_label_like(ns)
        {
            return Err(SettingsError::Namespace(ns.clone()));
        }
        if self
            .identity
            .as_deref()
            .is_some_and(|i| i.trim().is_empty())
        {
            return Err(SettingsError::EmptyIdentity);
        }
        let (lease, deadline, retry) = (
            self.lease_duration_seconds,
            self.renew_deadline_seconds,
            self.retry_period_seconds,
        );
        if retry == 0 || deadline <= retry || lease <= deadline {
            return Err(SettingsError::Timings {
                retry,
                deadline,
                lease,
            });
        }
        self.kubeconfig = self
            .kubeconfig
            .map(|p| if p.is_absolute() { p } else { root.join(p) });
        Ok(self)
    }

    /// The section's three durations as [`Timings`]; their order is checked by
    /// [`resolve`](CoordinationSettings::resolve), not here.
    pub fn timings(&self) -> Timings {
        Timings {
            lease_duration: Duration::from_secs(self.lease_duration_seconds.into()),
            renew_deadline: Duration::from_secs(self.renew_deadline_seconds.into()),
            retry_period: Duration::from_secs(self.retry_period_seconds.into()),
        }
    }
}

fn is_dns_label_like(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name.as_bytes()[name.len() - 1].is_ascii_alphanumeric()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<CoordinationSettings, String> {
        let s: CoordinationSettings = serde_yaml_ng::from_str(text).map_err(|e| e.to_string())?;
        s.resolve(Path::new("/etc/jobrelay"))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_are_single_replica_with_client_go_timings() {
        let s = parse("{}").expect("defaults");
        assert_eq!(s.mode, Mode::Single);
        assert_eq!(s.lease_name, "jobrelay");
        let t = s.timings();
        assert_eq!(t.lease_duration, Duration::from_secs(15));
        assert_eq!(t.renew_deadline, Duration::from_secs(10));
        assert_eq!(t.retry_period, Duration::from_secs(2));
    }

    #[test]
    fn relative_kubeconfig_is_against_the_config_folder() {
        let s = parse("mode: leader\nkubeconfig: home.yaml").expect("valid");
        assert_eq!(s.mode, Mode::Leader);
        assert_eq!(s.kubeconfig, Some(PathBuf::from("/etc/jobrelay/home.yaml")));
    }

    #[test]
    fn bad_values_name_the_field() {
        let e = parse("lease_duration_seconds: 5\nrenew_deadline_seconds: 5").unwrap_err();
        assert!(e.contains("renew_deadline_seconds (5)"), "{e}");
        let e = parse("retry_period_seconds: 0").unwrap_err();
        assert!(e.contains("retry_period_seconds (0)"), "{e}");
        let e = parse("lease_name: Jobrelay_Lease").unwrap_err();
        assert!(e.starts_with("coordination.lease_name"), "{e}");
        let e = parse("namespace: '-x'").unwrap_err();
        assert!(e.starts_with("coordination.namespace"), "{e}");
        let e = parse("identity: ' '").unwrap_err();
        assert!(e.starts_with("coordination.identity"), "{e}");
        let e = parse("mode: shards").unwrap_err();
        assert!(e.contains("mode"), "{e}");
        let e = parse("lease: x").unwrap_err();
        assert!(e.contains("unknown field"), "{e}");
    }
}
