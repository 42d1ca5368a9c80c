//! A plugin's filter: which jobs, and which of their events, its lane takes.
//!
//! The dispatcher asks before it copies an event for a lane, so an event a plugin does not
//! want costs no call, no queue entry and no store write. A filter judges on two levels,
//! because they mean different things for a job in flight:
//!
//! - **the job** — its cluster, namespace and labels (the kinds are the lane's own list): a job
//!   the filter does not take is not the plugin's at all. A job the lane knew that stops
//!   matching (its labels changed, or the filter did) is let go: nothing more of it is
//!   offered, its cursor goes once nothing of it waits, and its finalizer does not wait for
//!   this plugin.
//! - **the event** — its phase, and an optional CEL expression: the lane keeps the job and
//!   skips this version only, so a plugin that wants `failed` alone is still told of the
//!   failure, not of everything before it.
//!
//! The expression language is CEL, the one Kubernetes uses in its own admission policies,
//! evaluated by the `cel` crate; what the lists can say is judged without it, in well under a
//! microsecond (`docs/BENCHMARKS.md`).

use std::collections::HashMap;
use std::fmt;

use cel::{Context, Program, Value};
use serde::{Deserialize, Serialize};
use wildmatch::WildMatch;

use jobrelay_contract::event::{JobEvent, Phase};
use jobrelay_contract::label_selector::{Selector, SelectorError};

/// The `filter:` section of a plugin manifest, as written. Every list left empty takes all.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilterSpec {
    /// Cluster names (the kubeconfig file stems), `*` and `?` patterns.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<String>,
    /// Namespaces, `*` and `?` patterns.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
    /// Kind names of the main file; the same as the manifest's `kinds` (give one of the two).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kinds: Vec<String>,
    /// A Kubernetes label selector the job's labels must satisfy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<String>,
    /// The phases whose versions are delivered.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub phases: Vec<Phase>,
    /// Clusters and namespaces never taken, even when the lists above take them.
    #[serde(default, skip_serializing_if = "Exclude::is_empty")]
    pub exclude: Exclude,
    /// A CEL expression over `event` that must be true for the version to be delivered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expression: Option<String>,
}

/// `filter.exclude`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Exclude {
    /// Cluster names never taken, `*` and `?` patterns.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<String>,
    /// Namespaces never taken, `*` and `?` patterns.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
}

impl Exclude {
    fn is_empty(&self) -> bool {
        self.clusters.is_empty() && self.namespaces.is_empty()
    }
}

/// A filter that cannot be used as written; the message names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FilterError {
    /// An empty pattern in a list, which takes nothing.
    #[error(
        "filter.{field}[{index}]: an empty pattern takes nothing; leave the list out to take all"
    )]
    EmptyPattern {
        /// The list, as the manifest names it under `filter` (`exclude.clusters`).
        field: &'static str,
        /// The pattern's place in the list, from 0.
        index: usize,
    },
    /// `labels` is no label selector.
    #[error("filter.labels: {0}")]
    Labels(SelectorError),
    /// The expression does not compile; the CEL parser's message.
    #[error("filter.expression: {0}")]
    Expression(String),
    /// The expression names a variable other than `event`; the name.
    #[error("filter.expression: names `{0}`; the only name it can use is `event`")]
    UnknownName(String),
    /// The expression gives something other than a boolean on a sample event with every field
    /// set; the type it gave.
    #[error("filter.expression: gives {0}, not true or false")]
    NotBool(String),
}

/// What a filter says of one event for one lane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Deliver it.
    Take,
    /// The job is not the plugin's (cluster, namespace or labels).
    NotJob,
    /// The job is, this version is not (phase or expression).
    NotEvent,
    /// The expression failed on this event (a label it reads is missing, say): not delivered,
    /// and counted apart so an operator sees a filter that errs.
    Failed(String),
}

/// A compiled filter. Compared by what was written.
pub struct Filter {
    spec: FilterSpec,
    /// Nothing to judge: no list but the kinds, no expression.
    takes_all: bool,
    clusters: Vec<WildMatch>,
    namespaces: Vec<WildMatch>,
    exclude_clusters: Vec<WildMatch>,
    exclude_namespaces: Vec<WildMatch>,
    labels: Option<Selector>,
    expression: Option<Expression>,
}

struct Expression {
    program: Program,
    /// The functions CEL knows, built once: a fresh root context per event costs tens of µs.
    root: Context<'static, 'static>,
    /// The fields of `event` whose names the text mentions: only those are built for each
    /// event (a field cannot be read without its name in the text).
    fields: Vec<Field>,
}

/// A field of `event` as the expression sees it. The object itself is not one: parsing it
/// for every event would cost more than everything else a filter does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Cluster,
    Kind,
    ApiVersion,
    Namespace,
    Name,
    Uid,
    Phase,
    PreviousPhase,
    RawPhase,
    Reason,
    Message,
    Labels,
    Annotations,
    Synthetic,
}

impl Field {
    const ALL: [Field; 14] = [
        Field::Cluster,
        Field::Kind,
        Field::ApiVersion,
        Field::Namespace,
        Field::Name,
        Field::Uid,
        Field::Phase,
        Field::PreviousPhase,
        Field::RawPhase,
        Field::Reason,
        Field::Message,
        Field::Labels,
        Field::Annotations,
        Field::Synthetic,
    ];

    fn name(self) -> &'static str {
        match self {
            Field::Cluster => "cluster",
            Field::Kind => "kind",
            Field::ApiVersion => "api_version",
            Field::Namespace => "namespace",
            Field::Name => "name",
            Field::Uid => "uid",
            Field::Phase => "phase",
            Field::PreviousPhase => "previous_phase",
            Field::RawPhase => "raw_phase",
            Field::Reason => "reason",
            Field::Message => "message",
            Field::Labels => "labels",
            Field::Annotations => "annotations",
            Field::Synthetic => "synthetic",
        }
    }

    fn value(self, event: &JobEvent, kind: &str) -> Value {
        let text = |s: &str| Value::from(s.to_string());
        let optional = |s: Option<&str>| s.map_or(Value::Null, text);
        let map = |m: &std::collections::BTreeMap<String, String>| {
            Value::from(
                m.iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect::<HashMap<String, String>>(),
            )
        };
        match self {
            Field::Cluster => text(&event.cluster),
            Field::Kind => text(kind),
            Field::ApiVersion => text(&event.api_version),
            Field::Namespace => text(&event.namespace),
            Field::Name => text(&event.name),
            Field::Uid => text(&event.uid),
            Field::Phase => text(event.phase.as_str()),
            Field::PreviousPhase => optional(event.previous_phase.map(|p| p.as_str())),
            Field::RawPhase => text(&event.raw_phase),
            Field::Reason => optional(event.reason.as_deref()),
            Field::Message => optional(event.message.as_deref()),
            Field::Labels => map(&event.labels),
            Field::Annotations => map(&event.annotations),
            Field::Synthetic => Value::Bool(event.synthetic),
        }
    }
}

impl Filter {
    /// The filter that takes everything.
    pub fn all() -> Filter {
        Filter::new(FilterSpec::default()).unwrap_or_else(|_| unreachable!("an empty filter"))
    }

    /// Compiles `spec`, checking every pattern, the selector and the expression.
    pub fn new(spec: FilterSpec) -> Result<Filter, FilterError> {
        let globs = |field: &'static str, list: &[String]| {
            list.iter()
                .enumerate()
                .map(|(index, p)| {
                    if p.is_empty() {
                        Err(FilterError::EmptyPattern { field, index })
                    } else {
                        Ok(WildMatch::new(p))
                    }
                })
                .collect::<Result<Vec<_>, _>>()
        };
        let clusters = globs("clusters", &spec.clusters)?;
        let namespaces = globs("namespaces", &spec.namespaces)?;
        let exclude_clusters = globs("exclude.clusters", &spec.exclude.clusters)?;
        let exclude_namespaces = globs("exclude.namespaces", &spec.exclude.namespaces)?;
        let labels = spec
            .labels
            .as_deref()
            .map(Selector::parse)
            .transpose()
            .map_err(FilterError::Labels)?;
        let expression = spec.expression.as_deref().map(compile).transpose()?;
        let takes_all = FilterSpec {
            kinds: Vec::new(),
            ..spec.clone()
        } == FilterSpec::default();
        Ok(Filter {
            spec,
            takes_all,
            clusters,
            namespaces,
            exclude_clusters,
            exclude_namespaces,
            labels,
            expression,
        })
    }

    /// The filter as written.
    pub fn spec(&self) -> &FilterSpec {
        &self.spec
    }

    /// Whether the filter takes every job and every event (nothing to judge).
    pub fn takes_all(&self) -> bool {
        self.takes_all
    }

    /// Whether the job of `event` is the plugin's: its cluster, namespace and labels.
    pub fn takes_job(&self, event: &JobEvent) -> bool {
        self.takes_place(event)
            && self
                .labels
                .as_ref()
                .is_none_or(|s| s.matches(&event.labels))
    }

    /// Whether the job's cluster and namespace are taken (the job level without its labels).
    pub fn takes_place(&self, event: &JobEvent) -> bool {
        let any = |globs: &[WildMatch], s: &str| globs.iter().any(|g| g.matches(s));
        (self.clusters.is_empty() || any(&self.clusters, &event.cluster))
            && (self.namespaces.is_empty() || any(&self.namespaces, &event.namespace))
            && !any(&self.exclude_clusters, &event.cluster)
            && !any(&self.exclude_namespaces, &event.namespace)
    }

    /// Whether this version of a job the filter takes is delivered: its phase, then the
    /// expression (`kind` is the configured kind name, as the expression sees it).
    pub fn takes_event(&self, event: &JobEvent, kind: &str) -> Verdict {
        if !self.spec.phases.is_empty() && !self.spec.phases.contains(&event.phase) {
            return Verdict::NotEvent;
        }
        let Some(expression) = &self.expression else {
            return Verdict::Take;
        };
        match expression.judge(event, kind) {
            Ok(true) => Verdict::Take,
            Ok(false) => Verdict::NotEvent,
            Err(why) => Verdict::Failed(why.to_string()),
        }
    }

    /// Both levels at once.
    pub fn verdict(&self, event: &JobEvent, kind: &str) -> Verdict {
        if !self.takes_job(event) {
            return Verdict::NotJob;
        }
        self.takes_event(event, kind)
    }
}

fn compile(text: &str) -> Result<Expression, FilterError> {
    let program = Program::compile(text).map_err(|e| FilterError::Expression(e.to_string()))?;
    if let Some(name) = program
        .references()
        .variables()
        .into_iter()
        .find(|name| *name != "event")
    {
        return Err(FilterError::UnknownName(name.to_string()));
    }
    let fields = Field::ALL
        .into_iter()
        .filter(|f| text.contains(f.name()))
        .collect();
    let expression = Expression {
        program,
        root: Context::default(),
        fields,
    };
    // A sample event with every field set finds an expression that can never give a truth
    // value (a name or a sum, say). One that fails on the sample — reading a label it does not
    // have — may well be right for real jobs, so that is not judged here.
    if let Ok(value) = expression.evaluate(&sample(), "job")
        && !matches!(value, Value::Bool(_))
    {
        return Err(FilterError::NotBool(type_name(&value)));
    }
    Ok(expression)
}

/// Why the expression gives no verdict on one event (a label it reads is missing, say): the
/// event is not delivered, and counted apart ([`Verdict::Failed`]). Not a [`FilterError`]: the
/// filter as written is good, this event is what it cannot judge.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
enum EvaluationError {
    /// CEL could not evaluate the expression on the event.
    #[error(transparent)]
    Execution(#[from] cel::ExecutionError),
    /// The expression gave a value that is not a truth value (its type's name).
    #[error("gave {0}, not true or false")]
    NotBool(String),
}

impl Expression {
    fn evaluate(&self, event: &JobEvent, kind: &str) -> Result<Value, EvaluationError> {
        let mut context = self.root.new_inner_scope();
        let value: HashMap<String, Value> = self
            .fields
            .iter()
            .map(|f| (f.name().to_string(), f.value(event, kind)))
            .collect();
        context.add_variable_from_value("event", value);
        Ok(self.program.execute(&context)?)
    }

    fn judge(&self, event: &JobEvent, kind: &str) -> Result<bool, EvaluationError> {
        match self.evaluate(event, kind)? {
            Value::Bool(b) => Ok(b),
            other => Err(EvaluationError::NotBool(type_name(&other))),
        }
    }
}

fn type_name(value: &Value) -> String {
    match value {
        Value::Bool(_) => "a boolean",
        Value::Int(_) | Value::UInt(_) | Value::Float(_) => "a number",
        Value::String(_) => "a string",
        Value::List(_) => "a list",
        Value::Map(_) => "a map",
        Value::Null => "null",
        _ => "a value of another type",
    }
    .to_string()
}

/// An event with every field the expression can read set.
fn sample() -> JobEvent {
    let one = |k: &str, v: &str| [(k.to_string(), v.to_string())].into_iter().collect();
    JobEvent {
        id: "sample/sample/1".into(),
        transition_key: String::new(),
        cluster: "sample".into(),
        api_version: "batch/v1".into(),
        kind: "Job".into(),
        namespace: "sample".into(),
        name: "sample".into(),
        uid: "sample".into(),
        resource_version: "1".into(),
        generation: Some(1),
        phase: Phase::Failed,
        raw_phase: "Failed".into(),
        reason: Some("sample".into()),
        message: Some("sample".into()),
        previous_phase: Some(Phase::Running),
        labels: one("sample", "sample"),
        annotations: one("sample", "sample"),
        transition_time: "2026-01-01T00:00:00Z".into(),
        object_json: std::sync::Arc::from("{}"),
        synthetic: false,
        story: None,
    }
}

impl fmt::Debug for Filter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.spec.fmt(f)
    }
}

impl Default for Filter {
    fn default() -> Filter {
        Filter::all()
    }
}

impl PartialEq for Filter {
    fn eq(&self, other: &Filter) -> bool {
        self.spec == other.spec
    }
}

impl Eq for Filter {}

#[cfg(test)]
mod tests;
