//! Where things go in the archive and what the manifest says: pure data, no host calls.

use jobrelay_guest::{Phase, config, phase_from_name, phase_name};
use serde::{Deserialize, Serialize};

/// The phases that trigger archiving unless the config says otherwise.
pub const DEFAULT_PHASES: &[&str] = &["succeeded", "failed", "terminating", "deleted"];

/// Settings read in `init`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Phase names (the WIT `phase` names) that trigger archiving.
    pub phases: Vec<String>,
    /// Bytes asked of the host per log read.
    pub chunk_bytes: u32,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            phases: DEFAULT_PHASES.iter().map(|p| p.to_string()).collect(),
            chunk_bytes: 256 * 1024,
        }
    }
}

/// The manifest's `config` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default = "default_phases", deserialize_with = "config::phase_list")]
    phases: Vec<Phase>,
    #[serde(default = "default_chunk_kib")]
    chunk_kib: u32,
}

fn default_phases() -> Vec<Phase> {
    DEFAULT_PHASES
        .iter()
        .filter_map(|name| phase_from_name(name))
        .collect()
}

fn default_chunk_kib() -> u32 {
    256
}

impl Settings {
    pub fn from_config(config: &[(String, String)]) -> Result<Settings, String> {
        let Config { phases, chunk_kib } = config::read(config)?;
        if !(4..=1024).contains(&chunk_kib) {
            return Err(format!(
                "config `chunk_kib` must be 4 to 1024, got `{chunk_kib}`"
            ));
        }
        Ok(Settings {
            phases: phases
                .into_iter()
                .map(|p| phase_name(p).to_string())
                .collect(),
            chunk_bytes: chunk_kib * 1024,
        })
    }
}

/// The folder of one job: `cluster/namespace/uid`.
pub fn job_dir(cluster: &str, namespace: &str, uid: &str) -> String {
    format!("{cluster}/{namespace}/{uid}")
}

/// The key of one container log: `<job dir>/<pod>/<container>[.previous].log.gz`.
pub fn log_key(job_dir: &str, pod: &str, container: &str, previous: bool) -> String {
    let suffix = if previous { ".previous" } else { "" };
    format!("{job_dir}/{pod}/{container}{suffix}.log.gz")
}

/// The manifest written last, next to the logs: what was archived and what was missing.
#[derive(Debug, Clone, Serialize)]
pub struct Manifest {
    pub job: JobRef,
    /// The phase of the event that triggered the archive.
    pub phase: String,
    pub event_id: String,
    /// When this archive was written (RFC 3339).
    pub archived_at: String,
    pub pods: Vec<PodEntry>,
    /// Nothing could be archived because the job has no pods left (or never had any).
    pub no_pods: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct JobRef {
    pub cluster: String,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub api_version: String,
    pub kind: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct PodEntry {
    pub name: String,
    pub phase: String,
    pub node: Option<String>,
    pub containers: Vec<ContainerEntry>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ContainerEntry {
    pub name: String,
    pub init: bool,
    pub restart_count: u32,
    /// The current instance's log, then the previous instance's when it restarted.
    pub logs: Vec<LogEntry>,
}

#[derive(Debug, Clone, Serialize)]
pub struct LogEntry {
    pub previous: bool,
    /// The object key, relative to the plugin's prefix; absent when there was no log.
    pub key: Option<String>,
    /// Size of the log as read, before compression.
    pub bytes: u64,
    /// Size of the stored `.gz` object.
    pub stored_bytes: u64,
    /// Hex SHA-256 of the log as read (before compression), to check a download.
    pub sha256: Option<String>,
    /// The log was cut at the host's size cap.
    pub truncated: bool,
    /// Why there is no log (the pod or instance is gone, the container never started).
    pub missing: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_follow_the_documented_layout() {
        let dir = job_dir("east", "ml", "u-1");
        assert_eq!(dir, "east/ml/u-1");
        assert_eq!(
            log_key(&dir, "p-0", "main", false),
            "east/ml/u-1/p-0/main.log.gz"
        );
        assert_eq!(
            log_key(&dir, "p-0", "main", true),
            "east/ml/u-1/p-0/main.previous.log.gz"
        );
    }

    #[test]
    fn settings() {
        assert_eq!(Settings::from_config(&[]), Ok(Settings::default()));
        let s =
            Settings::from_config(&[("phases".into(), "Succeeded, failed".into())]).expect("valid");
        assert_eq!(s.phases, vec!["succeeded", "failed"]);
        assert!(Settings::from_config(&[("phases".into(), "done".into())]).is_err());
        assert!(Settings::from_config(&[("chunk_kib".into(), "0".into())]).is_err());
        assert!(Settings::from_config(&[("bucket".into(), "x".into())]).is_err());
    }
}
