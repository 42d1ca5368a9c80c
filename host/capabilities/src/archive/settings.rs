//! The main file's `archive:` section: a local folder or an S3-compatible bucket.
//!
//! Apart from the store because it is configuration: read and checked with the rest of the
//! main file, and printed in its debug form (never with the credentials), before any store is
//! opened.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The `archive:` section: one store for every plugin, each writing under its own prefix.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArchiveSettings {
    /// A local folder (relative: to the config folder). Default: `archive/` next to the
    /// state file (with the state in MySQL: `/var/lib/jobrelay/archive`).
    #[serde(default)]
    pub local: Option<PathBuf>,
    /// An S3-compatible bucket instead of a local folder.
    #[serde(default)]
    pub s3: Option<S3Settings>,
}

/// An S3-compatible object store.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct S3Settings {
    /// The bucket every plugin's prefix lives in.
    pub bucket: String,
    /// The bucket's region; default: the environment's (`AWS_REGION`, …).
    #[serde(default)]
    pub region: Option<String>,
    /// Endpoint for non-AWS stores (MinIO, Ceph), e.g. `http://minio:9000`.
    #[serde(default)]
    pub endpoint: Option<String>,
    /// Key id and secret; secret references (`env:NAME`, `file:/path`) are the expected form.
    #[serde(default)]
    pub access_key_id: Option<String>,
    /// The secret for `access_key_id`; like it, by default the environment's credentials.
    #[serde(default)]
    pub secret_access_key: Option<String>,
    /// Allow a plain-HTTP endpoint.
    #[serde(default)]
    pub allow_http: bool,
}

impl std::fmt::Debug for S3Settings {
    /// Never prints the credentials.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Settings")
            .field("bucket", &self.bucket)
            .field("region", &self.region)
            .field("endpoint", &self.endpoint)
            .field("allow_http", &self.allow_http)
            .finish_non_exhaustive()
    }
}

/// Where the archive lives, after validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArchiveLocation {
    /// A local folder, absolute.
    Local(PathBuf),
    /// An S3-compatible bucket.
    S3(S3Settings),
}
