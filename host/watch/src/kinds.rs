//! Job kinds as data: which resource to watch and how to read its status.
//!
//! New CRDs need no code: a kind names its group/version/plural and picks a normalizer,
//! either one of the built-in ones or a generic field/conditions rule.
//!
//! [`spec`] is the main file's `kinds:` entries as written, each resolved into a [`JobKind`]
//! (a built-in by name, or a complete custom kind) with its samples tried.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use jobrelay_contract::event::Phase;

use super::rules::{Rules, RulesSpec};

pub mod spec;

/// One kind of training job, as configured in the main file's `kinds:` list.
///
/// Writing only `name:` selects a built-in kind (`batch-job`, `volcano-job`, `pytorch-job`,
/// `mpi-job`, `mpi-job-v1`, `train-job`, `jobset`, `ray-job`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobKind {
    /// Identifier used by plugin manifests (`kinds: [volcano-job]`).
    pub name: String,
    /// The resource's API group (`batch`, `batch.volcano.sh`).
    pub group: String,
    /// The API version watched (`v1alpha1`).
    pub version: String,
    /// The resource's `kind` (`Job`), as events carry it.
    pub kind: String,
    /// The resource's plural name in API paths (`jobs`).
    pub plural: String,
    /// How the status becomes a phase.
    #[serde(with = "serde_yaml_ng::with::singleton_map")]
    pub normalizer: NormalizerSpec,
    /// Label that pods of this job carry with the job's name as value.
    #[serde(default)]
    pub pod_label: Option<String>,
    /// Whether jobrelay holds deletion of these jobs with its finalizer until every plugin
    /// that wants the kind has handled the deletion.
    #[serde(default)]
    pub finalizer: bool,
    /// The clusters (names, `*` matching any run of characters) this kind is watched on;
    /// empty: every cluster.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<String>,
    /// Statuses with the phase the normalizer must give them, tried by `jobrelay check`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub samples: Vec<Sample>,
    /// Which objects around these jobs are watched for their story (off by default).
    #[serde(default, skip_serializing_if = "StorySources::is_off")]
    pub story: StorySources,
}

/// The objects around a kind's jobs that are watched for their story
/// ([`crate::story`]). Each is one more watch per cluster (and namespace) the kind is watched
/// on, shared by every kind that asks for it; a kind that asks for none costs nothing per job.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StorySources {
    /// Kueue's Workloads (`kueue.x-k8s.io/v1beta2`): queued and why, admitted where,
    /// evicted or preempted and why, requeued, the accelerators admitted.
    #[serde(default)]
    pub kueue: bool,
    /// The pods: the first failing container of a job's pods and why (`OOMKilled`, exit 137,
    /// `ImagePullBackOff`). Every pod of the watched namespaces is read, so this is the
    /// costlier source.
    #[serde(default)]
    pub pods: bool,
}

impl StorySources {
    /// Whether no source is watched.
    pub fn is_off(&self) -> bool {
        !self.kueue && !self.pods
    }
}

/// A status written as a kind's controller writes it, and the phase it must normalize to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sample {
    /// What the sample stands for, shown when it fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The object's `status`.
    #[serde(default)]
    pub status: serde_json::Value,
    /// The object's `spec`, for rules that read it (`/spec/suspend`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<serde_json::Value>,
    /// The phase the normalizer must give.
    pub phase: Phase,
    /// The reason it must give, when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A sample the kind's normalizer does not read as its author said.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("samples[{index}]{name}: {what}")]
pub struct SampleMismatch {
    /// The sample's place in `samples`, from 0.
    pub index: usize,
    /// ` (name)` when the sample has one.
    pub name: String,
    /// What the normalizer gave instead of what the sample says.
    pub what: String,
}

impl Sample {
    /// The object this sample stands for.
    pub fn object(&self) -> serde_json::Value {
        let mut object = serde_json::Map::new();
        object.insert("metadata".into(), serde_json::json!({"name": "sample"}));
        if let Some(spec) = &self.spec {
            object.insert("spec".into(), spec.clone());
        }
        if !self.status.is_null() {
            object.insert("status".into(), self.status.clone());
        }
        serde_json::Value::Object(object)
    }
}

impl JobKind {
    /// Every sample normalized by the kind's rules; the first that does not give its phase
    /// (and reason, when the sample names one).
    pub fn check_samples(&self) -> Result<(), SampleMismatch> {
        for (index, sample) in self.samples.iter().enumerate() {
            let got = crate::normalize::normalize(&self.normalizer, &sample.object());
            let name = sample
                .name
                .as_ref()
                .map(|n| format!(" ({n})"))
                .unwrap_or_default();
            if got.phase != sample.phase {
                return Err(SampleMismatch {
                    index,
                    name,
                    what: format!(
                        "normalizes to {}, the sample says {} (raw phase `{}`)",
                        got.phase, sample.phase, got.raw_phase
                    ),
                });
            }
            if let Some(reason) = &sample.reason
                && got.reason.as_deref() != Some(reason.as_str())
            {
                return Err(SampleMismatch {
                    index,
                    name,
                    what: format!(
                        "gives reason {:?}, the sample says {reason:?}",
                        got.reason.as_deref().unwrap_or("")
                    ),
                });
            }
        }
        Ok(())
    }

    /// Whether this kind is watched on `cluster` (see [`JobKind::clusters`]).
    pub fn watched_on(&self, cluster: &str) -> bool {
        self.clusters.is_empty() || self.clusters.iter().any(|p| name_matches(p, cluster))
    }

    /// The kind's resource, as a dynamic API of kube addresses it.
    pub fn api_resource(&self) -> kube::api::ApiResource {
        let gvk = kube::api::GroupVersionKind::gvk(&self.group, &self.version, &self.kind);
        kube::api::ApiResource::from_gvk_with_plural(&gvk, &self.plural)
    }

    /// `group/version`, or just `version` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The built-in kinds, by name.
    pub fn builtin(name: &str) -> Option<JobKind> {
        let k = |group: &str, version: &str, kind: &str, plural: &str, n, label: &str| JobKind {
            name: name.to_string(),
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
            plural: plural.into(),
            normalizer: n,
            pod_label: Some(label.into()),
            finalizer: false,
            clusters: Vec::new(),
            samples: Vec::new(),
            story: StorySources::default(),
        };
        Some(match name {
            "batch-job" => k(
                "batch",
                "v1",
                "Job",
                "jobs",
                NormalizerSpec::Batch,
                "batch.kubernetes.io/job-name",
            ),
            "volcano-job" => k(
                "batch.volcano.sh",
                "v1alpha1",
                "Job",
                "jobs",
                NormalizerSpec::Volcano,
                "volcano.sh/job-name",
            ),
            "pytorch-job" => k(
                "kubeflow.org",
                "v1",
                "PyTorchJob",
                "pytorchjobs",
                NormalizerSpec::Kubeflow,
                "training.kubeflow.org/job-name",
            ),
            "mpi-job" => k(
                "kubeflow.org",
                "v2beta1",
                "MPIJob",
                "mpijobs",
                NormalizerSpec::Kubeflow,
                "training.kubeflow.org/job-name",
            ),
            "mpi-job-v1" => k(
                "kubeflow.org",
                "v1",
                "MPIJob",
                "mpijobs",
                NormalizerSpec::Kubeflow,
                "training.kubeflow.org/job-name",
            ),
            "train-job" => k(
                "trainer.kubeflow.org",
                "v1alpha1",
                "TrainJob",
                "trainjobs",
                NormalizerSpec::Rules(builtin_rules(BuiltinRules::TrainJob)),
                "jobset.sigs.k8s.io/jobset-name",
            ),
            "jobset" => k(
                "jobset.x-k8s.io",
                "v1alpha2",
                "JobSet",
                "jobsets",
                NormalizerSpec::Rules(builtin_rules(BuiltinRules::JobSet)),
                "jobset.sigs.k8s.io/jobset-name",
            ),
            "ray-job" => k(
                "ray.io",
                "v1",
                "RayJob",
                "rayjobs",
                NormalizerSpec::Rules(builtin_rules(BuiltinRules::RayJob)),
                "ray.io/originated-from-cr-name",
            ),
            _ => return None,
        })
    }

    /// Names of every built-in kind, as [`JobKind::builtin`] knows them.
    pub const BUILTINS: [&'static str; 8] = [
        "batch-job",
        "volcano-job",
        "pytorch-job",
        "mpi-job",
        "mpi-job-v1",
        "train-job",
        "jobset",
        "ray-job",
    ];

    /// Names of the built-in kinds watched when the main file lists none.
    pub const DEFAULT_BUILTINS: [&'static str; 4] =
        ["batch-job", "volcano-job", "pytorch-job", "mpi-job"];
}

/// The built-in kinds written in the rules language, as shipped beside this file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BuiltinRules {
    /// `train-job`: Kubeflow Trainer's `TrainJob`.
    TrainJob,
    /// `jobset`: the JobSet API's `JobSet`.
    JobSet,
    /// `ray-job`: KubeRay's `RayJob`.
    RayJob,
}

impl BuiltinRules {
    /// The rules as YAML text, exactly as `docs/job-kinds.md` shows them.
    pub fn text(self) -> &'static str {
        match self {
            BuiltinRules::TrainJob => include_str!("kinds/train-job.yaml"),
            BuiltinRules::JobSet => include_str!("kinds/jobset.yaml"),
            BuiltinRules::RayJob => include_str!("kinds/ray-job.yaml"),
        }
    }
}

/// A built-in kind's rules, read from the text shipped with this crate (no outside input: a
/// unit test reads every one).
fn builtin_rules(which: BuiltinRules) -> Rules {
    let spec: RulesSpec = serde_yaml_ng::from_str(which.text())
        .unwrap_or_else(|e| panic!("built-in rules {which:?} do not read: {e}"));
    Rules::try_from(spec).unwrap_or_else(|e| panic!("built-in rules {which:?}: {e}"))
}

/// How a kind's status becomes a normalized phase. In YAML: `batch`, `volcano`, `kubeflow`,
/// `{field: {...}}`, `{conditions: [...]}` or `{rules: {first_match: [...], otherwise: …}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NormalizerSpec {
    /// `batch/v1 Job` conditions and counters.
    Batch,
    /// Volcano `status.state.phase`.
    Volcano,
    /// Kubeflow training-operator / mpi-operator conditions.
    Kubeflow,
    /// A phase string at a JSON pointer, mapped through a table.
    Field(FieldRule),
    /// The first condition with status `True`, in the listed order.
    Conditions(Vec<ConditionRule>),
    /// The first of a list of rules whose tests all hold (`crate::rules`).
    Rules(Rules),
}

impl NormalizerSpec {
    /// Whether the rule can be applied as written: every JSON pointer of a field rule is one
    /// (starts with `/`, and `~` only in `~0` or `~1`, RFC 6901), and a conditions rule lists
    /// at least one condition with a type. A rule that fails this would read nothing from
    /// every job, silently; the error names the field, as `normalizer.field.time_path`.
    pub fn check(&self) -> Result<(), NormalizerError> {
        match self {
            NormalizerSpec::Field(rule) => {
                let pointers = [
                    ("path", Some(&rule.path)),
                    ("reason_path", rule.reason_path.as_ref()),
                    ("message_path", rule.message_path.as_ref()),
                    ("time_path", rule.time_path.as_ref()),
                ];
                for (field, pointer) in pointers {
                    if let Some(pointer) = pointer {
                        pointer_problem(pointer).map_or(Ok(()), |why| {
                            Err(NormalizerError::Pointer {
                                field,
                                pointer: pointer.clone(),
                                why,
                            })
                        })?;
                    }
                }
                Ok(())
            }
            NormalizerSpec::Conditions(rules) if rules.is_empty() => {
                Err(NormalizerError::NoConditions)
            }
            NormalizerSpec::Conditions(rules) => {
                match rules.iter().position(|r| r.type_.is_empty()) {
                    Some(i) => Err(NormalizerError::UntypedCondition(i)),
                    None => Ok(()),
                }
            }
            // Checked when read (`Rules::try_from`): a rules value is always usable.
            NormalizerSpec::Batch
            | NormalizerSpec::Volcano
            | NormalizerSpec::Kubeflow
            | NormalizerSpec::Rules(_) => Ok(()),
        }
    }

    /// Whether the normalizer, and the history it reads for transition keys and catch-up,
    /// read nothing of an object but its `status`, `metadata.deletionTimestamp` and
    /// `spec.suspend` — what the watcher hands them without decoding the rest
    /// ([`crate::object::JobObject::view`]). Only a field rule or a rules normalizer can point
    /// elsewhere.
    pub fn reads_status_only(&self) -> bool {
        let in_status = |pointer: &str| pointer == "/status" || pointer.starts_with("/status/");
        match self {
            NormalizerSpec::Rules(rules) => rules.reads_view_only(|p| {
                in_status(p) || p == "/spec/suspend" || p == "/metadata/deletionTimestamp"
            }),
            NormalizerSpec::Batch
            | NormalizerSpec::Volcano
            | NormalizerSpec::Kubeflow
            | NormalizerSpec::Conditions(_) => true,
            NormalizerSpec::Field(rule) => {
                in_status(&rule.path)
                    && [&rule.reason_path, &rule.message_path, &rule.time_path]
                        .into_iter()
                        .flatten()
                        .all(|p| in_status(p))
            }
        }
    }
}

/// A normalizer rule that would read nothing as written; the text names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NormalizerError {
    /// A field rule's pointer that is no JSON pointer.
    #[error("normalizer.field.{field} `{pointer}`: {why}")]
    Pointer {
        /// The field rule's setting (`path`, `time_path`, …).
        field: &'static str,
        /// The pointer as written.
        pointer: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// A conditions rule with no condition: every job would be `pending`.
    #[error("normalizer.conditions: the list is empty; give at least one `{{type, phase}}`")]
    NoConditions,
    /// The condition at this index has an empty `type`.
    #[error("normalizer.conditions[{0}].type: must not be empty")]
    UntypedCondition(usize),
}

/// What is wrong with a JSON pointer (RFC 6901), if anything.
pub(crate) fn pointer_problem(pointer: &str) -> Option<&'static str> {
    if !pointer.starts_with('/') {
        return Some("a JSON pointer starts with `/`");
    }
    let mut chars = pointer.chars();
    while let Some(c) = chars.next() {
        if c == '~' && !matches!(chars.next(), Some('0' | '1')) {
            return Some("`~` must be followed by 0 (for `~`) or 1 (for `/`)");
        }
    }
    None
}

/// A normalizer that reads the phase from one string field of the object and maps it through
/// a table (`normalizer: {field: {...}}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FieldRule {
    /// JSON pointer to the phase string, e.g. `/status/phase`.
    pub path: String,
    /// Raw value → phase. Values not listed normalise to `unknown`.
    pub phases: BTreeMap<String, Phase>,
    /// JSON pointer to the event's reason, e.g. `/status/reason`.
    #[serde(default)]
    pub reason_path: Option<String>,
    /// JSON pointer to the event's message.
    #[serde(default)]
    pub message_path: Option<String>,
    /// JSON pointer to when the phase began (RFC 3339), the event's transition time.
    #[serde(default)]
    pub time_path: Option<String>,
}

/// One entry of a conditions normalizer: a condition type and the phase it means while its
/// status is `True`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConditionRule {
    /// Condition `type`.
    #[serde(rename = "type")]
    pub type_: String,
    /// The phase a `True` condition of this type means.
    pub phase: Phase,
}
/// Whether `name` matches `pattern`, where `*` stands for any run of characters (cluster names
/// are DNS-like, so no other wildcard or escape is needed).
pub fn name_matches(pattern: &str, name: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = name.strip_prefix(first) else {
        return false;
    };
    let mut parts: Vec<&str> = parts.collect();
    let Some(last) = parts.pop() else {
        return rest.is_empty(); // no `*`: the whole name
    };
    for part in parts {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.ends_with(last)
}

#[cfg(test)]
mod pattern_tests {
    use super::*;

    #[test]
    fn rules_that_would_read_nothing_are_refused_by_field() {
        let field = |path: &str, time: Option<&str>| {
            NormalizerSpec::Field(FieldRule {
                path: path.into(),
                phases: Default::default(),
                reason_path: None,
                message_path: None,
                time_path: time.map(str::to_string),
            })
        };
        assert_eq!(
            field("/status/phase", Some("/status/a~1b~0c")).check(),
            Ok(())
        );
        let bad = field("/status/phase", Some("/status/~2x")).check();
        assert!(
            bad.as_ref()
                .is_err_and(|e| e.to_string().contains("normalizer.field.time_path")),
            "{bad:?}"
        );
        assert!(
            field("/status/~", None).check().is_err(),
            "a `~` at the end"
        );
        assert!(field("status/phase", None).check().is_err());
        let empty = NormalizerSpec::Conditions(Vec::new()).check();
        assert!(
            empty
                .as_ref()
                .is_err_and(|e| e.to_string().contains("normalizer.conditions")),
            "{empty:?}"
        );
        let untyped = NormalizerSpec::Conditions(vec![ConditionRule {
            type_: String::new(),
            phase: Phase::Running,
        }]);
        assert!(untyped.check().is_err());
    }

    #[test]
    fn cluster_patterns() {
        for (pattern, name, matches) in [
            ("gpu-east", "gpu-east", true),
            ("gpu-east", "gpu-east-2", false),
            ("gpu-*", "gpu-east", true),
            ("gpu-*", "cpu-east", false),
            ("*-east", "gpu-east", true),
            ("*", "anything", true),
            ("g*-e*t", "gpu-east", true),
            ("g*-e*t", "gpu-west", false),
            ("a*a", "a", false),
        ] {
            assert_eq!(name_matches(pattern, name), matches, "{pattern} ~ {name}");
        }
        let mut kind = JobKind::builtin("volcano-job").expect("built-in");
        assert!(kind.watched_on("any"));
        kind.clusters = vec!["gpu-*".into()];
        assert!(kind.watched_on("gpu-1") && !kind.watched_on("cpu-1"));
    }
}
