//! The `kinds:` section: the job kinds to watch, each a built-in kind by name or a full
//! definition for any CRD, made a [`JobKind`] of `jobrelay-watch` when the file is read — its
//! normalizer checked and its samples tried then, so a kind whose rules read one of its own
//! samples otherwise refuses the file.

use serde::{Deserialize, Serialize};

use jobrelay_watch::kinds::{JobKind, NormalizerSpec, Sample};

/// A `kinds:` entry: a built-in kind by name, or a full kind definition for any CRD.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KindEntry {
    pub name: String,
    #[serde(default)]
    pub group: Option<String>,
    #[serde(default)]
    pub version: Option<String>,
    #[serde(default)]
    pub kind: Option<String>,
    #[serde(default)]
    pub plural: Option<String>,
    #[serde(default, with = "serde_yaml_ng::with::singleton_map")]
    pub normalizer: Option<NormalizerSpec>,
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
}

/// Why a `kinds:` entry is refused; the message names the kind, and the field at fault.
#[derive(Debug, thiserror::Error)]
pub(crate) enum KindError {
    #[error("`name` must not be empty")]
    NoName,
    #[error(
        "`{name}` is not a built-in kind (built-in: {}); give group, version, kind, plural and \
         normalizer",
        JobKind::BUILTINS.join(", ")
    )]
    NotBuiltin { name: String },
    #[error("`{name}`: `{field}` is missing or empty")]
    Missing { name: String, field: &'static str },
    #[error("`{name}`: missing `normalizer`")]
    NoNormalizer { name: String },
    /// The normalizer's own check (`jobrelay-watch`), in its words.
    #[error("`{name}`: {why}")]
    Normalizer { name: String, why: String },
    /// A sample the normalizer does not read as the file says.
    #[error("`{name}`: {why}")]
    Sample {
        name: String,
        why: jobrelay_watch::kinds::SampleMismatch,
    },
}

impl KindEntry {
    pub(crate) fn named(name: &str) -> KindEntry {
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
        }
    }

    /// A name alone selects a built-in kind; anything else must be a complete definition.
    pub(crate) fn resolve(self) -> Result<JobKind, KindError> {
        let is_bare = self.group.is_none()
            && self.version.is_none()
            && self.kind.is_none()
            && self.plural.is_none()
            && self.normalizer.is_none();
        if self.name.is_empty() {
            return Err(KindError::NoName);
        }
        if is_bare {
            let (finalizer, clusters, samples) = (self.finalizer, self.clusters, self.samples);
            let kind = JobKind::builtin(&self.name)
                .map(|k| JobKind {
                    finalizer,
                    clusters,
                    samples,
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
            name: self.name,
        };
        kind.normalizer
            .check()
            .map_err(|why| KindError::Normalizer {
                name: kind.name.clone(),
                why: why.to_string(),
            })?;
        kind.check_samples().map_err(|why| KindError::Sample {
            name: kind.name.clone(),
            why,
        })?;
        Ok(kind)
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::config::main_file::MainConfig;

    #[test]
    fn a_custom_kind_whose_rule_reads_nothing_is_refused_naming_the_field() {
        let kind = |normalizer: &str| {
            format!(
                "kinds:\n  - name: trainjob\n    group: example.com\n    version: v1\n    \
                 kind: TrainJob\n    plural: trainjobs\n    normalizer: {normalizer}\n"
            )
        };
        let bad_escape = MainConfig::parse(
            &kind("{field: {path: /status/phase, time_path: /status/~2since, phases: {}}}"),
            Path::new("/cfg"),
        )
        .expect_err("a bad escape");
        assert!(
            bad_escape
                .to_string()
                .contains("normalizer.field.time_path"),
            "{bad_escape}"
        );
        let empty = MainConfig::parse(&kind("{conditions: []}"), Path::new("/cfg"))
            .expect_err("no conditions");
        assert!(
            empty.to_string().contains("normalizer.conditions"),
            "{empty}"
        );
    }

    /// A kind written as rules, with samples: the samples are tried when the file is read,
    /// and one the rules read otherwise refuses the file naming the kind and the sample.
    #[test]
    fn kind_samples_are_tried_when_the_file_is_read() {
        let file = |phase: &str| {
            format!(
                "kinds:\n  - name: mljob\n    group: example.com\n    version: v1\n    \
                 kind: MLJob\n    plural: mljobs\n    normalizer:\n      rules:\n        \
                 first_match:\n          - {{phase: running, when: [{{condition: Suspended, \
                 status: \"False\", reason: [Resumed]}}]}}\n    samples:\n      - name: resumed\n        \
                 status: {{conditions: [{{type: Suspended, status: \"False\", reason: Resumed}}]}}\n        \
                 phase: {phase}\n  - name: jobset\n    samples:\n      - {{status: {{}}, spec: \
                 {{suspend: true}}, phase: suspended}}\n"
            )
        };
        let ok = MainConfig::parse(&file("running"), Path::new("/cfg")).expect("valid");
        assert_eq!(ok.kinds[0].samples.len(), 1);
        let err = MainConfig::parse(&file("failed"), Path::new("/cfg"))
            .expect_err("a sample the rules read otherwise")
            .to_string();
        assert!(
            err.contains(
                "`mljob`: samples[0] (resumed): normalizes to running, the sample says failed"
            ),
            "{err}"
        );
    }
    #[test]
    fn custom_kind_needs_every_field() {
        let err = MainConfig::parse(
            "kinds:\n  - name: trainjob\n    group: example.com\n    version: v1\n",
            Path::new("/cfg"),
        )
        .expect_err("incomplete kind");
        assert!(err.to_string().contains("kinds[0]"), "{err}");
        assert!(err.to_string().contains("kind"), "{err}");
    }
    #[test]
    fn custom_kind_with_field_rule() {
        let c = MainConfig::parse(
            "kinds:\n  - name: volcano-job\n  - name: trainjob\n    group: example.com\n    version: v1\n    kind: TrainJob\n    plural: trainjobs\n    normalizer:\n      field:\n        path: /status/phase\n        phases: {Done: succeeded}\n",
            Path::new("/cfg"),
        )
        .expect("valid");
        assert_eq!(c.kinds.len(), 2);
        assert_eq!(
            c.kind("trainjob").map(|k| k.api_version()),
            Some("example.com/v1".into())
        );
    }
}
