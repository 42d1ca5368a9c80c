//! The process's archive store: opened once from the main file's settings (a local folder, or
//! an S3 client that takes the standard AWS environment), shared by every plugin, counting the
//! writers open and the bytes under each prefix.
//!
//! Apart from the calls that write into it because it outlives every call, and because how an
//! S3 client finds its credentials is a concern of its own.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use object_store::ObjectStore;
use object_store::path::Path as StorePath;

use super::settings::{ArchiveLocation, S3Settings};
use crate::open_error::OpenError;
use jobrelay_contract::secret;

/// The process's archive store.
#[derive(Clone)]
pub struct ArchiveStore {
    pub(super) store: Arc<dyn ObjectStore>,
    description: String,
    /// Writers alive now, all plugins together (each holds up to a part in memory).
    pub(super) open_writers: Arc<std::sync::atomic::AtomicUsize>,
    /// Bytes held under each prefix, objects being written included (reserved).
    usage: Arc<parking_lot::Mutex<HashMap<String, Arc<AtomicU64>>>>,
}

impl std::fmt::Debug for ArchiveStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.description)
    }
}

impl ArchiveStore {
    /// Opens the store the main file describes; a local folder is created if missing.
    pub fn open(location: &ArchiveLocation) -> Result<ArchiveStore, OpenError> {
        match location {
            ArchiveLocation::Local(root) => {
                std::fs::create_dir_all(root).map_err(|source| OpenError::ArchiveFolder {
                    path: root.clone(),
                    source,
                })?;
                let store = object_store::local::LocalFileSystem::new_with_prefix(root).map_err(
                    |source| OpenError::ArchiveLocal {
                        path: root.clone(),
                        source,
                    },
                )?;
                Ok(ArchiveStore {
                    store: Arc::new(store),
                    description: format!("local folder {}", root.display()),
                    open_writers: Arc::default(),
                    usage: Arc::default(),
                })
            }
            ArchiveLocation::S3(s3) => {
                let builder = s3_builder(s3)?;
                let store = builder
                    .build()
                    .map_err(|source| OpenError::ArchiveS3 { source })?;
                Ok(ArchiveStore {
                    store: Arc::new(store),
                    description: format!("s3 bucket {}", s3.bucket),
                    open_writers: Arc::default(),
                    usage: Arc::default(),
                })
            }
        }
    }

    /// What [`ArchiveStore::open`] refuses of an S3 bucket, found without keeping the store:
    /// a credential's secret reference that does not resolve, settings that make no client.
    /// No request is made. (A local folder is judged by whoever must not create it.)
    pub fn check_s3(s3: &S3Settings) -> Result<(), OpenError> {
        s3_builder(s3)?
            .build()
            .map(drop)
            .map_err(|source| OpenError::ArchiveS3 { source })
    }

    /// Writers open now, across all plugins and calls: each may hold up to a part (5 MiB) in
    /// memory until it is finished or dropped.
    pub fn open_writers(&self) -> usize {
        self.open_writers.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The byte count of `prefix`, listed from the store the first time it is asked for.
    pub async fn usage(&self, prefix: &str) -> Result<Arc<AtomicU64>, UsageError> {
        if let Some(known) = self.known_usage(prefix) {
            return Ok(known);
        }
        let path = StorePath::parse(prefix).map_err(|source| UsageError::Prefix {
            prefix: prefix.to_string(),
            source,
        })?;
        let mut listed = self.store.list(Some(&path));
        let mut bytes = 0u64;
        while let Some(meta) = futures::StreamExt::next(&mut listed).await {
            let meta = meta.map_err(|source| UsageError::Listing {
                prefix: prefix.to_string(),
                source,
            })?;
            bytes += meta.size;
        }
        let mut usage = self.usage.lock();
        Ok(usage
            .entry(prefix.to_string())
            .or_insert_with(|| Arc::new(AtomicU64::new(bytes)))
            .clone())
    }

    /// The byte count of `prefix` if it was listed already.
    pub(super) fn known_usage(&self, prefix: &str) -> Option<Arc<AtomicU64>> {
        let usage = self.usage.lock();
        usage.get(prefix).cloned()
    }
}

/// Why the bytes under a prefix could not be counted.
#[derive(Debug, thiserror::Error)]
pub enum UsageError {
    /// The prefix is no store path.
    #[error("prefix `{prefix}`: {source}")]
    Prefix {
        /// The plugin's prefix.
        prefix: String,
        /// What object_store's path parser refused.
        source: object_store::path::Error,
    },
    /// The store could not list the prefix.
    #[error("listing `{prefix}`: {source}")]
    Listing {
        /// The plugin's prefix.
        prefix: String,
        /// The store's error.
        source: object_store::Error,
    },
}

/// The S3 client's settings: the environment's standard AWS settings first (`AWS_*`: keys and
/// session token, region, web identity for IRSA, container credentials for EKS Pod Identity
/// and ECS; without any, the instance's metadata service), then what the main file sets, which
/// wins. So a pod with a role needs no keys in the config at all.
fn s3_builder(s3: &S3Settings) -> Result<object_store::aws::AmazonS3Builder, OpenError> {
    let mut builder = object_store::aws::AmazonS3Builder::from_env()
        .with_bucket_name(&s3.bucket)
        .with_allow_http(s3.allow_http);
    if let Some(region) = &s3.region {
        builder = builder.with_region(region);
    }
    if let Some(endpoint) = &s3.endpoint {
        builder = builder.with_endpoint(endpoint);
    }
    if let Some(id) = &s3.access_key_id {
        let id = secret::resolve(id).map_err(|source| OpenError::ArchiveSecret {
            field: "access_key_id",
            source,
        })?;
        builder = builder.with_access_key_id(id);
    }
    if let Some(key) = &s3.secret_access_key {
        let key = secret::resolve(key).map_err(|source| OpenError::ArchiveSecret {
            field: "secret_access_key",
            source,
        })?;
        builder = builder.with_secret_access_key(key);
    }
    Ok(builder)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The standard AWS environment reaches the S3 client (here EKS Pod Identity's container
    /// credentials and a region), and what the main file sets wins over it.
    #[test]
    fn s3_takes_the_standard_aws_environment_and_the_config_wins() {
        use object_store::aws::AmazonS3ConfigKey as Key;
        // SAFETY: no other test in this crate reads or writes the environment.
        unsafe {
            std::env::set_var(
                "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                "http://169.254.170.23/v1",
            );
            std::env::set_var("AWS_DEFAULT_REGION", "eu-north-1");
            std::env::set_var("AWS_ACCESS_KEY_ID", "from-environment");
        }
        let mut s3 = S3Settings {
            bucket: "logs".into(),
            region: None,
            endpoint: None,
            access_key_id: None,
            secret_access_key: None,
            allow_http: false,
        };
        let builder = s3_builder(&s3).expect("builder");
        assert_eq!(
            builder
                .get_config_value(&Key::ContainerCredentialsFullUri)
                .as_deref(),
            Some("http://169.254.170.23/v1")
        );
        assert_eq!(
            builder.get_config_value(&Key::Region).as_deref(),
            Some("eu-north-1")
        );
        s3.region = Some("us-east-2".into());
        s3.access_key_id = Some("from-config".into());
        let builder = s3_builder(&s3).expect("builder");
        assert_eq!(
            builder.get_config_value(&Key::Region).as_deref(),
            Some("us-east-2")
        );
        assert_eq!(
            builder.get_config_value(&Key::AccessKeyId).as_deref(),
            Some("from-config")
        );
    }
}
