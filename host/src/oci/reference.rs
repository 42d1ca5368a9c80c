//! `oci://REGISTRY/REPOSITORY[:TAG]@sha256:DIGEST`: a plugin component in an OCI registry,
//! pinned by the digest of its manifest.
//!
//! The digest is required. A tag can be moved to other content at any time; the digest cannot,
//! so what runs is exactly what was pushed and reviewed, and a changed reference in the
//! manifest file is the one way to run something else (which reloads the plugin like any
//! manifest change). The tag is kept for people reading the manifest and for the registry's
//! listing; the pull goes by digest.

use std::fmt;

use oci_client::Reference;

/// The scheme of a registry reference in a manifest's `wasm:`.
pub const SCHEME: &str = "oci://";

/// A parsed, pinned reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OciRef {
    /// `host[:port]`.
    pub registry: String,
    pub repository: String,
    pub tag: Option<String>,
    /// The manifest's sha256, lowercase hex.
    pub digest_hex: String,
}

/// Why a reference is refused; the message quotes it whole.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OciRefError {
    #[error("`{text}` does not start with {SCHEME}")]
    NoScheme { text: String },
    #[error("`{text}` has no @sha256:<digest>: a registry component must be pinned by its digest")]
    NotPinned { text: String },
    #[error("`{text}`: the digest must be 64 hex digits")]
    BadDigest { text: String },
    #[error("`{text}`: a push target has no digest (the push makes one)")]
    TargetWithDigest { text: String },
    #[error("`{text}` has no :tag")]
    NoTag { text: String },
    #[error("`{text}` names no repository (oci://REGISTRY/REPOSITORY)")]
    NoRepository { text: String },
    #[error("`{text}` names no registry or repository")]
    EmptyName { text: String },
    #[error(
        "`{text}`: the repository `{repository}` must be lowercase letters, digits, `.`, `_`, `-` \
         and `/`"
    )]
    BadRepository { text: String, repository: String },
    #[error("`{text}`: `{tag}` is not a tag")]
    BadTag { text: String, tag: String },
}

impl OciRef {
    /// Whether a manifest's `wasm:` names a registry rather than a file.
    pub fn is_oci(text: &str) -> bool {
        text.starts_with(SCHEME)
    }

    /// Parses `oci://host[:port]/repo[/more]...[:tag]@sha256:<64 hex>`.
    pub fn parse(text: &str) -> Result<OciRef, OciRefError> {
        let rest = without_scheme(text)?;
        let (name, digest) = rest
            .split_once("@sha256:")
            .ok_or_else(|| OciRefError::NotPinned {
                text: text.to_string(),
            })?;
        if digest.len() != 64 || !digest.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(OciRefError::BadDigest {
                text: text.to_string(),
            });
        }
        let (registry, repository, tag) = parse_name(text, name)?;
        Ok(OciRef {
            registry,
            repository,
            tag,
            digest_hex: digest.to_ascii_lowercase(),
        })
    }

    /// Parses where `plugin push` puts a component: `oci://host[:port]/repo:tag`, no digest
    /// (the push makes it). Returns registry, repository and tag.
    pub fn parse_target(text: &str) -> Result<(String, String, String), OciRefError> {
        let name = without_scheme(text)?;
        if name.contains('@') {
            return Err(OciRefError::TargetWithDigest {
                text: text.to_string(),
            });
        }
        match parse_name(text, name)? {
            (registry, repository, Some(tag)) => Ok((registry, repository, tag)),
            (_, _, None) => Err(OciRefError::NoTag {
                text: text.to_string(),
            }),
        }
    }

    /// `sha256:<hex>`.
    pub fn digest(&self) -> String {
        format!("sha256:{}", self.digest_hex)
    }

    /// The reference the client pulls by: the digest.
    pub fn by_digest(&self) -> Reference {
        Reference::with_digest(
            self.registry.clone(),
            self.repository.clone(),
            self.digest(),
        )
    }
}

/// `text` after its `oci://`.
fn without_scheme(text: &str) -> Result<&str, OciRefError> {
    text.strip_prefix(SCHEME)
        .ok_or_else(|| OciRefError::NoScheme {
            text: text.to_string(),
        })
}

/// `host[:port]/repo[/more]...[:tag]` → registry, repository, tag; `text` is the whole
/// reference, for messages.
fn parse_name(text: &str, name: &str) -> Result<(String, String, Option<String>), OciRefError> {
    let (registry, path) = name
        .split_once('/')
        .ok_or_else(|| OciRefError::NoRepository {
            text: text.to_string(),
        })?;
    if registry.is_empty() || path.is_empty() {
        return Err(OciRefError::EmptyName {
            text: text.to_string(),
        });
    }
    // A tag is after the last `:` of the last path segment (a port is in the registry).
    let last = path.rsplit('/').next().unwrap_or(path);
    let (repository, tag) = match last.rsplit_once(':') {
        Some((_, tag)) => (
            path[..path.len() - tag.len() - 1].to_string(),
            Some(tag.to_string()),
        ),
        None => (path.to_string(), None),
    };
    let valid_repository = repository.split('/').all(|part| {
        !part.is_empty()
            && part.bytes().all(|b| {
                b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-')
            })
    });
    if !valid_repository {
        return Err(OciRefError::BadRepository {
            text: text.to_string(),
            repository,
        });
    }
    if let Some(tag) = &tag {
        let valid_tag = !tag.is_empty()
            && tag.len() <= 128
            && tag
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if !valid_tag {
            return Err(OciRefError::BadTag {
                text: text.to_string(),
                tag: tag.clone(),
            });
        }
    }
    Ok((registry.to_string(), repository, tag))
}

impl fmt::Display for OciRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{SCHEME}{}/{}", self.registry, self.repository)?;
        if let Some(tag) = &self.tag {
            write!(f, ":{tag}")?;
        }
        write!(f, "@{}", self.digest())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn references_parse_and_print_back() {
        for text in [
            format!("oci://127.0.0.1:5000/plugins/event-log:v1@sha256:{D}"),
            format!("oci://ghcr.io/team/ml/notify@sha256:{D}"),
            format!("oci://registry.example.com/a:1.2.3-rc_1@sha256:{D}"),
        ] {
            let parsed = OciRef::parse(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(parsed.to_string(), text);
        }
        let parsed = OciRef::parse(&format!(
            "oci://127.0.0.1:5000/plugins/event-log:v1@sha256:{D}"
        ))
        .expect("parses");
        assert_eq!(parsed.registry, "127.0.0.1:5000");
        assert_eq!(parsed.repository, "plugins/event-log");
        assert_eq!(parsed.tag.as_deref(), Some("v1"));
    }

    #[test]
    fn what_is_not_pinned_or_well_formed_is_refused_with_the_reason() {
        for (text, why) in [
            ("oci://r.io/a:v1".to_string(), "pinned"),
            (format!("oci://r.io/a@sha256:{}", &D[1..]), "64 hex"),
            (
                format!("oci://r.io/a@sha256:{}", D.replace('a', "g")),
                "64 hex",
            ),
            (format!("oci://r.io@sha256:{D}"), "no repository"),
            (format!("oci://r.io/Upper@sha256:{D}"), "lowercase"),
            (format!("oci://r.io/a:b/c@sha256:{D}"), "lowercase"),
            (format!("https://r.io/a@sha256:{D}"), "oci://"),
        ] {
            let error = OciRef::parse(&text).expect_err(&text).to_string();
            assert!(error.contains(why), "{text}: {error}");
        }
        assert_eq!(
            OciRef::parse_target("oci://127.0.0.1:5000/plugins/x:v2"),
            Ok(("127.0.0.1:5000".into(), "plugins/x".into(), "v2".into()))
        );
        assert!(
            OciRef::parse_target("oci://r.io/x").is_err_and(|e| e.to_string().contains(":tag"))
        );
        assert!(
            OciRef::parse_target(&format!("oci://r.io/x:v1@sha256:{D}"))
                .is_err_and(|e| e.to_string().contains("no digest"))
        );
    }
}
