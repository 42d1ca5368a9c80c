//! Why the services behind the capabilities could not be opened at start: each variant names
//! the main file's field at fault and keeps the error beneath it as its source, so a caller
//! can print the whole chain ([`chain`]) or inspect its parts.

use std::path::PathBuf;

use jobrelay_contract::secret::SecretError;

/// A field of the main file the host cannot use for plugins' SQL or archive.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// A connection's URL is a secret reference that cannot be resolved.
    #[error("sql.connections.{connection}: url")]
    SqlSecret {
        /// The connection's name under `sql.connections`.
        connection: String,
        /// Which reference failed and why.
        #[source]
        source: SecretError,
    },
    /// A connection's URL is not one the host can use. The parser's own error is not kept: it
    /// can quote the URL, password included.
    #[error("sql.connections.{connection}: url: {why}")]
    SqlUrl {
        /// The connection's name under `sql.connections`.
        connection: String,
        /// What is wrong with the URL, in words that quote none of it.
        why: &'static str,
    },
    /// The local archive folder cannot be created.
    #[error("archive.local: cannot create `{}`", path.display())]
    ArchiveFolder {
        /// The folder, resolved against the config folder.
        path: PathBuf,
        /// Why the file system refused.
        #[source]
        source: std::io::Error,
    },
    /// The local archive folder cannot be used as a store.
    #[error("archive.local: `{}`", path.display())]
    ArchiveLocal {
        /// The folder, resolved against the config folder.
        path: PathBuf,
        /// object_store's reason.
        #[source]
        source: object_store::Error,
    },
    /// An S3 credential is a secret reference that cannot be resolved.
    #[error("archive.s3.{field}")]
    ArchiveSecret {
        /// `access_key_id` or `secret_access_key`.
        field: &'static str,
        /// Which reference failed and why.
        #[source]
        source: SecretError,
    },
    /// The S3 settings do not make a store.
    #[error("archive.s3")]
    ArchiveS3 {
        /// What object_store refused in them.
        #[source]
        source: object_store::Error,
    },
}

pub use jobrelay_watch::error_text::chain;

#[cfg(test)]
mod tests {
    use super::*;

    /// An error that prints its source in its own text, as kube's `ServiceError: {0}` does.
    #[derive(Debug, thiserror::Error)]
    #[error("ServiceError: {0}")]
    struct Service(#[source] Client);

    #[derive(Debug, thiserror::Error)]
    #[error("client error (Connect)")]
    struct Client(#[source] std::io::Error);

    #[test]
    fn the_chain_says_the_cause_once() {
        let e = Service(Client(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "tcp connect error: Connection refused (os error 111)",
        )));
        assert_eq!(
            chain(&e),
            "ServiceError: client error (Connect): tcp connect error: Connection refused (os \
             error 111)"
        );
    }

    #[test]
    fn the_chain_names_the_field_then_the_cause() {
        let e = OpenError::ArchiveFolder {
            path: PathBuf::from("/nowhere/archive"),
            source: std::io::Error::new(std::io::ErrorKind::PermissionDenied, "denied"),
        };
        assert_eq!(
            chain(&e),
            "archive.local: cannot create `/nowhere/archive`: denied"
        );
        assert!(std::error::Error::source(&e).is_some());
        let e = OpenError::SqlSecret {
            connection: "main".into(),
            source: SecretError::Empty("env:"),
        };
        assert_eq!(
            chain(&e),
            "sql.connections.main: url: `env:` is an empty secret reference"
        );
    }
}
