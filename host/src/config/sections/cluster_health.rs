//! The `cluster_health:` section: how often clusters are checked and how many checks in a row
//! make one offline or bring it back. Checked here, made the health board's
//! [`CheckSettings`] (`clusters::health`) with the fleet's availability [`Thresholds`].

use serde::{Deserialize, Serialize};

use crate::clusters::health::CheckSettings;
use jobrelay_fleet::availability::Thresholds;

/// The `cluster_health:` section as written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterHealthSpec {
    /// Time between two health checks of a cluster, in milliseconds (default 10,000).
    #[serde(default = "default_check_interval_ms")]
    pub check_interval_ms: u64,
    /// Failed checks in a row that make a cluster offline (default 3).
    #[serde(default = "default_offline_after")]
    pub offline_after: u32,
    /// Good checks in a row that bring an offline cluster back online (default 2).
    #[serde(default = "default_online_after")]
    pub online_after: u32,
}

impl Default for ClusterHealthSpec {
    fn default() -> ClusterHealthSpec {
        ClusterHealthSpec {
            check_interval_ms: default_check_interval_ms(),
            offline_after: default_offline_after(),
            online_after: default_online_after(),
        }
    }
}

fn default_check_interval_ms() -> u64 {
    CheckSettings::default().interval.as_millis() as u64
}

fn default_offline_after() -> u32 {
    CheckSettings::default().thresholds.offline_after
}

fn default_online_after() -> u32 {
    CheckSettings::default().thresholds.online_after
}

/// Why the `cluster_health:` section is refused; the message names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ClusterHealthError {
    #[error("cluster_health.check_interval_ms: between 100 and 600000 (10 minutes)")]
    CheckInterval { given: u64 },
    /// `offline_after` or `online_after` out of range.
    #[error("cluster_health.{field}: between 1 and 100")]
    Threshold { field: &'static str, given: u32 },
}

impl ClusterHealthSpec {
    pub(crate) fn validate(&self) -> Result<CheckSettings, ClusterHealthError> {
        if !(100..=600_000).contains(&self.check_interval_ms) {
            return Err(ClusterHealthError::CheckInterval {
                given: self.check_interval_ms,
            });
        }
        for (field, given) in [
            ("offline_after", self.offline_after),
            ("online_after", self.online_after),
        ] {
            if !(1..=100).contains(&given) {
                return Err(ClusterHealthError::Threshold { field, given });
            }
        }
        Ok(CheckSettings {
            interval: std::time::Duration::from_millis(self.check_interval_ms),
            thresholds: Thresholds {
                offline_after: self.offline_after,
                online_after: self.online_after,
            },
        })
    }
}
