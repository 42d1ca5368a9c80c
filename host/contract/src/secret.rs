//! Secret references in config values: `env:NAME` and `file:/path`.
//!
//! Passwords, webhook tokens and signing secrets should not sit in a ConfigMap. A value written
//! as `env:NAME` is read from the host's environment (a Secret mapped to an env var), one
//! written as `file:/path` from a file (a mounted Secret; one trailing newline is dropped, as
//! `kubectl create secret --from-file` keeps it). Anything else is taken literally.
//!
//! Resolution happens when a plugin version or a connection is loaded, not when the file is
//! parsed, so a missing secret fails that load with the config key named, and the resolved
//! value is never part of anything that is logged or printed.

use std::path::Path;

/// A reference that could not be resolved. Names the reference, never a value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    /// `env:NAME` where the variable `NAME` (the payload) is unset or not UTF-8.
    #[error("environment variable `{0}` is not set (or not valid UTF-8)")]
    MissingEnv(String),
    /// `file:/path` where the file cannot be read.
    #[error("cannot read secret file `{path}`: {reason}")]
    File {
        /// The path after `file:`.
        path: String,
        /// The I/O error's kind (`not found`, `permission denied`), never the file's content.
        reason: String,
    },
    /// `env:` or `file:` (the payload) with nothing after it.
    #[error("`{0}` is an empty secret reference")]
    Empty(&'static str),
}

/// The value a config string stands for.
pub fn resolve(value: &str) -> Result<String, SecretError> {
    if let Some(name) = value.strip_prefix("env:") {
        if name.is_empty() {
            return Err(SecretError::Empty("env:"));
        }
        return std::env::var(name).map_err(|_| SecretError::MissingEnv(name.to_string()));
    }
    if let Some(path) = value.strip_prefix("file:") {
        if path.is_empty() {
            return Err(SecretError::Empty("file:"));
        }
        let text = std::fs::read_to_string(Path::new(path)).map_err(|e| SecretError::File {
            path: path.to_string(),
            reason: e.kind().to_string(),
        })?;
        let text = text.strip_suffix('\n').unwrap_or(&text);
        let text = text.strip_suffix('\r').unwrap_or(text);
        return Ok(text.to_string());
    }
    Ok(value.to_string())
}

/// Whether a value is a secret reference (and so must never be shown resolved).
pub fn is_reference(value: &str) -> bool {
    value.starts_with("env:") || value.starts_with("file:")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_values_pass_through() {
        assert_eq!(resolve("plain").as_deref(), Ok("plain"));
        assert_eq!(resolve("").as_deref(), Ok(""));
        assert!(!is_reference("https://x"));
    }

    #[test]
    fn env_references() {
        // SAFETY: the variable name is unique to this test, so no other thread reads it.
        unsafe { std::env::set_var("JOBRELAY_SECRET_TEST_VAR", "s3cr3t") };
        assert_eq!(
            resolve("env:JOBRELAY_SECRET_TEST_VAR").as_deref(),
            Ok("s3cr3t")
        );
        let missing = resolve("env:JOBRELAY_SECRET_TEST_MISSING").unwrap_err();
        assert!(missing.to_string().contains("JOBRELAY_SECRET_TEST_MISSING"));
        assert_eq!(resolve("env:"), Err(SecretError::Empty("env:")));
    }

    #[test]
    fn file_references_drop_one_newline_and_never_show_content() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("token");
        std::fs::write(&path, "abc\n").expect("write");
        let reference = format!("file:{}", path.display());
        assert_eq!(resolve(&reference).as_deref(), Ok("abc"));
        let missing = resolve("file:/nonexistent/secret").unwrap_err();
        assert!(missing.to_string().contains("/nonexistent/secret"));
    }
}
