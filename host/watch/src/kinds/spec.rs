//! The main file's `kinds:` section as written: each entry a built-in kind by name or a full
//! definition for any CRD, made a [`JobKind`] when the file is read — its normalizer checked
//! and its samples tried then, so a kind whose rules read one of its own samples otherwise
//! refuses the file. Written here, beside [`JobKind`], because what makes a kind complete is
//! this crate's knowledge; the host's main file holds a list of these and names the entry's
//! index in its error.

use serde::{Deserialize, Serialize};

use super::{JobKind, NormalizerError, NormalizerSpec, Sample, SampleMismatch, StorySources};

/// A `kinds:` entry: a built-in kind by name, or a full kind definition for any CRD.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KindEntry {
    /// A built-in kind's name, or the name manifests use for a custom kind.
    pub name: String,
    /// The resource's API group (a custom kind only).
    #[serde(default)]
    pub group: Option<String>,
    /// The API version watched (a custom kind only).
    #[serde(default)]
    pub version: Option<String>,
    /// The resource's `kind` (a custom kind only).
    #[serde(default)]
    pub kind: Option<String>,
    /// The resource's plural name in API paths (a custom kind only).
    #[serde(default)]
    pub plural: Option<String>,
    /// How the status becomes a phase (a custom kind only).
    #[serde(default, with = "serde_yaml_ng::with::singleton_map")]
    pub normalizer: Option<NormalizerSpec>,
    /// Label that pods of this job carry with the job's name as value.
    #[serde(default)]
    pub pod_label: Option<String>,
    /// Hold deletion of these jobs with jobrelay's finalizer (see `finalizers`).
    #[serde(default)]
    pub finalizer: bool,
    /// Watch this kind only on these clusters (names; `*` matches any run of characters).
    /// Empty: every cluster.
    #[serde(default)]
    pub clusters: Vec<String>,
    /// Statuses and the phase each must give, tried when the file is read (and by `check`).
    #[serde(default)]
    pub samples: Vec<Sample>,
    /// The objects around these jobs watched for their story (`kueue`, `pods`).
    #[serde(default)]
    pub story: StorySources,
}

/// Why a `kinds:` entry is refused; the message names the kind, and the field at fault.
#[derive(Debug, thiserror::Error)]
pub enum KindError {
    /// The entry has no name, so nothing could refer to it.
    #[error("`name` must not be empty")]
    NoName,
    /// A name alone that names no built-in kind.
    #[error(
        "`{name}` is not a built-in kind (built-in: {}); give group, version, kind, plural and \
         normalizer",
        JobKind::BUILTINS.join(", ")
    )]
    NotBuiltin {
        /// The name as written.
        name: String,
    },
    /// A custom kind without one of the fields that locate its resource.
    #[error("`{name}`: `{field}` is missing or empty")]
    Missing {
        /// The kind's name.
        name: String,
        /// The field missing.
        field: &'static str,
    },
    /// A custom kind without a normalizer.
    #[error("`{name}`: missing `normalizer`")]
    NoNormalizer {
        /// The kind's name.
        name: String,
    },
    /// The normalizer's own check, in its words.
    #[error("`{name}`: {why}")]
    Normalizer {
        /// The kind's name.
        name: String,
        /// What the normalizer's check refused, naming its field.
        why: NormalizerError,
    },
    /// A sample the normalizer does not read as the file says.
    #[error("`{name}`: {why}")]
    Sample {
        /// The kind's name.
        name: String,
        /// The sample and what the normalizer made of it.
        why: SampleMismatch,
    },
}

impl KindEntry {
    /// An entry selecting the built-in kind `name`, as if the file had written only its name
    /// (the main file's default kinds).
    pub fn named(name: &str) -> KindEntry {
        KindEntry {
            name: name.to_string(),
            group: None,
            version: None,
            kind: None,
            plural: None,
            normalizer: None,
            pod_label: None,
            finalizer: false,
            clusters: Vec::new(),
            samples: Vec::new(),
            story: StorySources::default(),
        }
    }

    /// The kind this entry describes. A name alone selects a built-in kind; anything else
    /// must be a complete definition. Either way its samples are tried here, so a kind that
    /// reads one of them otherwise is refused when the file is read, not when a job arrives.
    pub fn resolve(self) -> Result<JobKind, KindError> {
        let is_bare = self.group.is_none()
            && self.version.is_none()
            && self.kind.is_none()
            && self.plural.is_none()
            && self.normalizer.is_none();
        if self.name.is_empty() {
            return Err(KindError::NoName);
        }
        if is_bare {
            let (finalizer, clusters, samples, story) =
                (self.finalizer, self.clusters, self.samples, self.story);
            let kind = JobKind::builtin(&self.name)
                .map(|k| JobKind {
                    finalizer,
                    clusters,
                    samples,
                    story,
                    ..k
                })
                .ok_or_else(|| KindError::NotBuiltin {
                    name: self.name.clone(),
                })?;
            return match kind.check_samples() {
                Ok(()) => Ok(kind),
                Err(why) => Err(KindError::Sample {
                    name: kind.name,
                    why,
                }),
            };
        }
        let need = |v: Option<String>, field: &'static str| {
            v.filter(|s| !s.is_empty())
                .ok_or_else(|| KindError::Missing {
                    name: self.name.clone(),
                    field,
                })
        };
        // Custom resources always have an API group; the core group (`/api/v1`) serves no
        // job kinds, and a kind placed there would be listed as missing on every cluster.
        let group = need(self.group.clone(), "group")?;
        let kind = JobKind {
            group,
            version: need(self.version.clone(), "version")?,
            kind: need(self.kind.clone(), "kind")?,
            plural: need(self.plural.clone(), "plural")?,
            normalizer: self
                .normalizer
                .clone()
                .ok_or_else(|| KindError::NoNormalizer {
                    name: self.name.clone(),
                })?,
            pod_label: self.pod_label.clone(),
            finalizer: self.finalizer,
            clusters: self.clusters,
            samples: self.samples,
            story: self.story,
            name: self.name,
        };
        kind.normalizer
            .check()
            .map_err(|why| KindError::Normalizer {
                name: kind.name.clone(),
                why,
            })?;
        kind.check_samples().map_err(|why| KindError::Sample {
            name: kind.name.clone(),
            why,
        })?;
        Ok(kind)
    }
}
