//! Job kinds as data: which resource to watch and how to read its status.
//!
//! New CRDs need no code: a kind names its group/version/plural and picks a normalizer,
//! either one of the built-in ones or a generic field/conditions rule.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use jobrelay_contract::event::Phase;

/// One kind of training job, as configured in the main file's `kinds:` list.
///
/// Writing only `name:` selects a built-in kind (`batch-job`, `volcano-job`, `pytorch-job`,
/// `mpi-job`, `mpi-job-v1`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobKind {
    /// Identifier used by plugin manifests (`kinds: [volcano-job]`).
    pub name: String,
    pub group: String,
    pub version: String,
    pub kind: String,
    pub plural: String,
    #[serde(with = "serde_yaml_ng::with::singleton_map")]
    pub normalizer: NormalizerSpec,
    /// Label that pods of this job carry with the job's name as value.
    #[serde(default)]
    pub pod_label: Option<String>,
    /// Whether jobrelay holds deletion of these jobs with its finalizer until every plugin
    /// that wants the kind has handled the deletion.
    #[serde(default)]
    pub finalizer: bool,
}

impl JobKind {
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
            _ => return None,
        })
    }

    /// Names of the built-in kinds watched when the main file lists none.
    pub const DEFAULT_BUILTINS: [&'static str; 4] =
        ["batch-job", "volcano-job", "pytorch-job", "mpi-job"];
}

/// How a kind's status becomes a normalized phase. In YAML: `batch`, `volcano`, `kubeflow`,
/// `{field: {...}}` or `{conditions: [...]}`.
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
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FieldRule {
    /// JSON pointer to the phase string, e.g. `/status/phase`.
    pub path: String,
    /// Raw value → phase. Values not listed normalise to `unknown`.
    pub phases: BTreeMap<String, Phase>,
    /// Optional JSON pointers for reason, message and transition time.
    #[serde(default)]
    pub reason_path: Option<String>,
    #[serde(default)]
    pub message_path: Option<String>,
    #[serde(default)]
    pub time_path: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConditionRule {
    /// Condition `type`.
    #[serde(rename = "type")]
    pub type_: String,
    pub phase: Phase,
}
