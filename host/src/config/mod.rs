//! Configuration: the watched config folder, its files, and the desired state they describe.
//!
//! Layout of the folder:
//! - `jobrelay.yaml` — the main file ([`main_file`]);
//! - `clusters/NAME` — one kubeconfig per file, the file stem is the cluster's name;
//! - `plugins/NAME.yaml` — one manifest per plugin ([`manifest`]).
//!
//! Every file is judged on its own: a file that fails to parse or validate is reported and the
//! last good version of that file stays in force; nothing else is disturbed.

pub mod files;
pub mod folder_watch;
pub mod home_cluster;
pub mod label_selector;
pub mod main_file;
pub mod manifest;
pub mod secret;
pub mod sources;
pub mod state;

/// Why one config file was refused. The file's path is attached by the caller.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read: {0}")]
    Read(String),
    #[error("cannot parse: {0}")]
    Parse(String),
    #[error("invalid: {0}")]
    Invalid(String),
}
