//! The `rules` normalizer: a kind's phase decided by an ordered list of rules, each a set of
//! tests on the object — a condition with its status and reason, a field's value, a sum of
//! counts, a CEL expression — the first rule whose tests all hold deciding.
//!
//! Why a list of rules and not one more built-in per kind: the kinds platforms run change
//! faster than releases (TrainJob has no running condition at all, JobSet only sometimes,
//! RayJob keeps two enums), and each new one was a reading of upstream's types that a team
//! could have written itself had the language been able to say it. The built-in `train-job`,
//! `jobset` and `ray-job` kinds are written in this language (`kinds/*.yaml` beside this
//! file), so it is proven on the kinds it was made for.
//!
//! What each test gives when its input is absent is part of the contract (`docs/job-kinds.md`):
//! a condition test holds only for a condition that is there; a field test reads an absent
//! field (or `null`) as the empty string; a sum counts what is there (an absent path sums to
//! 0); an expression that fails or gives no boolean does not hold. No rule holding gives
//! `otherwise` (default `pending`).

use std::borrow::Cow;
use std::sync::Arc;

use cel::{Context, Program};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::json_pointer::{at, step};
use super::kinds::pointer_problem;
use super::normalize::Normalized;
use jobrelay_contract::event::Phase;

/// `normalizer: {rules: …}` as written in the main file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RulesSpec {
    /// Tried in order; the first rule whose tests all hold decides the phase.
    pub first_match: Vec<PhaseRule>,
    /// The phase when no rule holds.
    #[serde(default = "pending")]
    pub otherwise: Phase,
}

fn pending() -> Phase {
    Phase::Pending
}

/// One rule: a phase and the tests that must all hold for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PhaseRule {
    /// The phase the job is in while every test holds.
    pub phase: Phase,
    /// Every test must hold; at least one.
    pub when: Vec<Test>,
    /// The raw phase the event carries; by default the first condition test's type, else the
    /// first field test's value, else empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw: Option<String>,
    /// JSON pointer to the event's reason; where not given, the first condition test's
    /// condition supplies it (as it does the message and the time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason_path: Option<String>,
    /// JSON pointer to the event's message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_path: Option<String>,
    /// JSON pointer to when the phase began (RFC 3339), the event's transition time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_path: Option<String>,
}

/// One test; exactly one of `condition`, `field`, `sum`, `expression` is given.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Test {
    /// A `status.conditions[]` entry of this type is there…
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub condition: Option<String>,
    /// …with this status (default `"True"`)…
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// …and one of these reasons (empty: any reason).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reason: Vec<String>,
    /// The value at this JSON pointer is one of `is` (an absent field or `null` reads as
    /// `""`; booleans and numbers as their text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// The values a field test holds for: strings, booleans or numbers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub is: Vec<Value>,
    /// The sum of the integers at this path (a `*` token takes every element of an array) is
    /// above `above` (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sum: Option<String>,
    /// The bound a sum test's sum must be above.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub above: Option<i64>,
    /// A CEL expression over `status` (the object's status, `{}` when it has none) and
    /// `object` (the whole object) that gives true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expression: Option<String>,
}

/// A rules normalizer as the watcher uses it: the spec as written, with its expressions
/// compiled once. Compared, written and read as its spec.
#[derive(Clone, Serialize, Deserialize)]
#[serde(try_from = "RulesSpec", into = "RulesSpec")]
pub struct Rules {
    spec: RulesSpec,
    /// Per rule, per test: the compiled expression of an expression test.
    compiled: Arc<Compiled>,
}

struct Compiled {
    programs: Vec<Vec<Option<Program>>>,
    /// The functions CEL knows, built once (a fresh root context per evaluation costs tens of
    /// microseconds).
    root: Context<'static, 'static>,
    /// Whether an expression names `object` (the whole object must then be decoded).
    reads_object: bool,
}

/// A rules normalizer that cannot be used as written; the text names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RulesError {
    /// `first_match` lists no rule: every job would get `otherwise`.
    #[error("normalizer.rules.first_match: the list is empty; give at least one rule")]
    Empty,
    /// The rule at this index has an empty `when`, so it would always hold.
    #[error("normalizer.rules.first_match[{0}].when: give at least one test")]
    NoTests(usize),
    /// A test gives none, or more than one, of the four kinds of test.
    #[error(
        "normalizer.rules.first_match[{rule}].when[{test}]: give exactly one of `condition`, \
         `field`, `sum`, `expression` (found {found})"
    )]
    TestKind {
        /// The rule's place in `first_match`, from 0.
        rule: usize,
        /// The test's place in the rule's `when`, from 0.
        test: usize,
        /// How many of the four it gives.
        found: usize,
    },
    /// A setting that belongs to another kind of test (`is` without `field`).
    #[error("normalizer.rules.first_match[{rule}].when[{test}].{key}: only with `{with}`")]
    Stray {
        /// The rule's place in `first_match`, from 0.
        rule: usize,
        /// The test's place in the rule's `when`, from 0.
        test: usize,
        /// The stray setting.
        key: &'static str,
        /// The kind of test it belongs to.
        with: &'static str,
    },
    /// A field test with an empty `is`, which could never hold.
    #[error("normalizer.rules.first_match[{rule}].when[{test}].is: give the values that hold")]
    NoValues {
        /// The rule's place in `first_match`, from 0.
        rule: usize,
        /// The test's place in the rule's `when`, from 0.
        test: usize,
    },
    /// A value of `is` that is a list or a map, which a field's text never equals.
    #[error(
        "normalizer.rules.first_match[{rule}].when[{test}].is[{index}]: a string, boolean or \
         number"
    )]
    NotScalar {
        /// The rule's place in `first_match`, from 0.
        rule: usize,
        /// The test's place in the rule's `when`, from 0.
        test: usize,
        /// The value's place in `is`, from 0.
        index: usize,
    },
    /// A JSON pointer that is not one (RFC 6901).
    #[error("normalizer.rules.first_match[{rule}].{field} `{pointer}`: {why}")]
    Pointer {
        /// The rule's place in `first_match`, from 0.
        rule: usize,
        /// Where the pointer is written, under the rule (`time_path`, `when[0].field`).
        field: String,
        /// The pointer as written.
        pointer: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// A condition test with an empty type.
    #[error("normalizer.rules.first_match[{rule}].when[{test}].condition: must not be empty")]
    EmptyCondition {
        /// The rule's place in `first_match`, from 0.
        rule: usize,
        /// The test's place in the rule's `when`, from 0.
        test: usize,
    },
    /// An expression test whose CEL does not compile, or names a variable other than
    /// `status` and `object`.
    #[error("normalizer.rules.first_match[{rule}].when[{test}].expression: {why}")]
    Expression {
        /// The rule's place in `first_match`, from 0.
        rule: usize,
        /// The test's place in the rule's `when`, from 0.
        test: usize,
        /// The CEL parser's message, or the name it cannot use.
        why: String,
    },
}

impl TryFrom<RulesSpec> for Rules {
    type Error = RulesError;

    fn try_from(spec: RulesSpec) -> Result<Rules, RulesError> {
        if spec.first_match.is_empty() {
            return Err(RulesError::Empty);
        }
        let mut programs = Vec::with_capacity(spec.first_match.len());
        let mut reads_object = false;
        for (r, rule) in spec.first_match.iter().enumerate() {
            if rule.when.is_empty() {
                return Err(RulesError::NoTests(r));
            }
            let paths = [
                ("reason_path", &rule.reason_path),
                ("message_path", &rule.message_path),
                ("time_path", &rule.time_path),
            ];
            for (field, pointer) in paths {
                if let Some(pointer) = pointer {
                    check_pointer(r, field.to_string(), pointer)?;
                }
            }
            let mut per_test = Vec::with_capacity(rule.when.len());
            for (t, test) in rule.when.iter().enumerate() {
                let program = test.check(r, t)?;
                if let Some(program) = &program {
                    reads_object |= program
                        .references()
                        .variables()
                        .into_iter()
                        .any(|v| v == "object");
                }
                per_test.push(program);
            }
            programs.push(per_test);
        }
        Ok(Rules {
            spec,
            compiled: Arc::new(Compiled {
                programs,
                root: Context::default(),
                reads_object,
            }),
        })
    }
}

impl From<Rules> for RulesSpec {
    fn from(rules: Rules) -> RulesSpec {
        rules.spec
    }
}

impl PartialEq for Rules {
    fn eq(&self, other: &Rules) -> bool {
        self.spec == other.spec
    }
}

impl Eq for Rules {}

impl std::fmt::Debug for Rules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.spec.fmt(f)
    }
}

fn check_pointer(rule: usize, field: String, pointer: &str) -> Result<(), RulesError> {
    match pointer_problem(pointer) {
        None => Ok(()),
        Some(why) => Err(RulesError::Pointer {
            rule,
            field,
            pointer: pointer.to_string(),
            why,
        }),
    }
}

impl Test {
    /// Whether the test can be used as written; its compiled expression, if it is one.
    fn check(&self, rule: usize, test: usize) -> Result<Option<Program>, RulesError> {
        let found = [
            self.condition.is_some(),
            self.field.is_some(),
            self.sum.is_some(),
            self.expression.is_some(),
        ]
        .into_iter()
        .filter(|b| *b)
        .count();
        if found != 1 {
            return Err(RulesError::TestKind { rule, test, found });
        }
        let stray = |key: &'static str, present: bool, with: &'static str| {
            if present {
                Err(RulesError::Stray {
                    rule,
                    test,
                    key,
                    with,
                })
            } else {
                Ok(())
            }
        };
        let at = |what: &str| format!("when[{test}].{what}");
        stray(
            "status",
            self.status.is_some() && self.condition.is_none(),
            "condition",
        )?;
        stray(
            "reason",
            !self.reason.is_empty() && self.condition.is_none(),
            "condition",
        )?;
        stray("is", !self.is.is_empty() && self.field.is_none(), "field")?;
        stray("above", self.above.is_some() && self.sum.is_none(), "sum")?;
        if let Some(condition) = &self.condition
            && condition.is_empty()
        {
            return Err(RulesError::EmptyCondition { rule, test });
        }
        if let Some(field) = &self.field {
            check_pointer(rule, at("field"), field)?;
            if self.is.is_empty() {
                return Err(RulesError::NoValues { rule, test });
            }
            if let Some(index) = self.is.iter().position(|v| scalar_text(v).is_none()) {
                return Err(RulesError::NotScalar { rule, test, index });
            }
        }
        if let Some(sum) = &self.sum {
            check_pointer(rule, at("sum"), sum)?;
        }
        let Some(text) = &self.expression else {
            return Ok(None);
        };
        let why = |why: String| RulesError::Expression { rule, test, why };
        let program = Program::compile(text).map_err(|e| why(e.to_string()))?;
        if let Some(name) = program
            .references()
            .variables()
            .into_iter()
            .find(|name| *name != "status" && *name != "object")
        {
            return Err(why(format!(
                "names `{name}`; the names it can use are `status` and `object`"
            )));
        }
        Ok(Some(program))
    }
}

/// The text a scalar matches as in a field test: strings as they are, booleans and numbers
/// as written, `null` as `""`; `None` for arrays and objects.
fn scalar_text(value: &Value) -> Option<Cow<'_, str>> {
    match value {
        Value::String(s) => Some(Cow::Borrowed(s)),
        Value::Bool(b) => Some(Cow::Borrowed(if *b { "true" } else { "false" })),
        Value::Number(n) => Some(Cow::Owned(n.to_string())),
        Value::Null => Some(Cow::Borrowed("")),
        Value::Array(_) | Value::Object(_) => None,
    }
}

/// What made a test hold: the condition it found, or the field value it read.
enum Evidence<'a> {
    Condition(&'a Value),
    Field(Cow<'a, str>),
    Other,
}

/// One dated entry of a rules kind's history: a rule that holds now and says when it began.
pub(crate) struct DatedEntry {
    pub phase: Phase,
    pub raw: String,
    pub reason: Option<String>,
    pub message: Option<String>,
    pub at: String,
    /// The rule's position counted from the end: the first rule (the most final) is highest.
    pub rank: usize,
}

impl Rules {
    /// The spec as written.
    pub fn spec(&self) -> &RulesSpec {
        &self.spec
    }

    /// Whether every pointer and expression reads only what the watcher's view of an object
    /// holds (its status, `metadata.deletionTimestamp` and `spec.suspend`).
    pub fn reads_view_only(&self, in_view: impl Fn(&str) -> bool) -> bool {
        if self.compiled.reads_object {
            return false;
        }
        self.spec.first_match.iter().all(|rule| {
            [&rule.reason_path, &rule.message_path, &rule.time_path]
                .into_iter()
                .flatten()
                .all(|p| in_view(p))
                && rule.when.iter().all(|t| {
                    [&t.field, &t.sum]
                        .into_iter()
                        .flatten()
                        .all(|p| in_view(&p.replace("/*", "/0")))
                })
        })
    }

    /// The phase of `object` by the first rule that holds.
    pub fn normalize(&self, object: &Value) -> Normalized {
        for (r, rule) in self.spec.first_match.iter().enumerate() {
            if let Some(evidence) = self.holds(r, object) {
                return decided(rule, object, evidence);
            }
        }
        Normalized {
            phase: self.spec.otherwise,
            raw_phase: String::new(),
            reason: None,
            message: None,
            transition_time: None,
        }
    }

    /// The dated entries of the history a catch-up reads: each rule that holds now and dates
    /// itself — by its condition's `lastTransitionTime` or its `time_path` — at that time.
    /// A rule with neither (a count, a field without a time) records nothing.
    pub(crate) fn dated_entries(&self, object: &Value) -> Vec<DatedEntry> {
        let n = self.spec.first_match.len();
        let mut entries = Vec::new();
        for (r, rule) in self.spec.first_match.iter().enumerate() {
            if rule.time_path.is_none() && !rule.when.iter().any(|t| t.condition.is_some()) {
                continue;
            }
            let Some(evidence) = self.holds(r, object) else {
                continue;
            };
            let normalized = decided(rule, object, evidence);
            if let Some(at) = normalized.transition_time {
                entries.push(DatedEntry {
                    phase: normalized.phase,
                    raw: normalized.raw_phase,
                    reason: normalized.reason,
                    message: normalized.message,
                    at,
                    rank: n - 1 - r,
                });
            }
        }
        entries
    }

    /// Whether rule `r` holds for `object`, with what decided it: the first condition test's
    /// condition, else the first field test's value.
    fn holds<'a>(&self, r: usize, object: &'a Value) -> Option<Evidence<'a>> {
        let rule = &self.spec.first_match[r];
        let mut evidence = Evidence::Other;
        for (t, test) in rule.when.iter().enumerate() {
            let found = if let Some(ty) = &test.condition {
                condition(object, ty, test).map(Evidence::Condition)
            } else if let Some(pointer) = &test.field {
                let value = at(object, pointer)
                    .and_then(scalar_text)
                    .unwrap_or_default();
                test.is
                    .iter()
                    .any(|v| scalar_text(v).is_some_and(|v| v == value))
                    .then_some(Evidence::Field(value))
            } else if let Some(path) = &test.sum {
                (sum(object, path) > test.above.unwrap_or(0)).then_some(Evidence::Other)
            } else {
                let program = self.compiled.programs[r][t].as_ref()?;
                self.judge(program, object).then_some(Evidence::Other)
            };
            let found = found?;
            let better = matches!(
                (&evidence, &found),
                (Evidence::Other, Evidence::Condition(_) | Evidence::Field(_))
                    | (Evidence::Field(_), Evidence::Condition(_))
            );
            if better {
                evidence = found;
            }
        }
        Some(evidence)
    }

    fn judge(&self, program: &Program, object: &Value) -> bool {
        let mut context = self.compiled.root.new_inner_scope();
        let status = object
            .get("status")
            .map_or_else(|| cel_value(&Value::Object(Default::default())), cel_value);
        context.add_variable_from_value("status", status);
        if self.compiled.reads_object {
            context.add_variable_from_value("object", cel_value(object));
        }
        matches!(program.execute(&context), Ok(cel::Value::Bool(true)))
    }
}

/// A JSON value as CEL reads it, numbers as Kubernetes' CEL types JSON numbers: integers as
/// `int` (so `status.ready * 2` works, where a `uint` would not mix with the literal), others
/// as `double`.
fn cel_value(value: &Value) -> cel::Value {
    match value {
        Value::Null => cel::Value::Null,
        Value::Bool(b) => cel::Value::Bool(*b),
        Value::Number(n) => n
            .as_i64()
            .map(cel::Value::Int)
            .unwrap_or_else(|| cel::Value::Float(n.as_f64().unwrap_or(f64::NAN))),
        Value::String(s) => cel::Value::String(Arc::new(s.clone())),
        Value::Array(items) => cel::Value::List(Arc::new(items.iter().map(cel_value).collect())),
        Value::Object(map) => cel::Value::Map(cel::objects::Map {
            map: Arc::new(
                map.iter()
                    .map(|(k, v)| (cel::objects::Key::String(Arc::new(k.clone())), cel_value(v)))
                    .collect(),
            ),
        }),
    }
}

/// The `status.conditions[]` entry of type `ty` matching the test's status and reasons.
fn condition<'a>(object: &'a Value, ty: &str, test: &Test) -> Option<&'a Value> {
    let text = |c: &'a Value, k: &str| c.get(k).and_then(Value::as_str);
    let want = test.status.as_deref().unwrap_or("True");
    at(object, "/status/conditions")
        .and_then(Value::as_array)?
        .iter()
        .find(|c| text(c, "type") == Some(ty))
        .filter(|c| text(c, "status") == Some(want))
        .filter(|c| {
            test.reason.is_empty()
                || text(c, "reason").is_some_and(|r| test.reason.iter().any(|w| w == r))
        })
}

/// The sum of the integers at `path`, where a `*` token takes every element of an array.
fn sum(object: &Value, path: &str) -> i64 {
    path.strip_prefix('/')
        .map_or(0, |rest| sum_of(object, rest))
}

/// The sum at the tokens `rest` (`a/*/b`) below `value`, walked token by token without
/// making a pointer per step: a built-in TrainJob or JobSet sums on every version.
fn sum_of(value: &Value, rest: &str) -> i64 {
    let (first, tail) = match rest.split_once('/') {
        Some((first, tail)) => (first, Some(tail)),
        None => (rest, None),
    };
    let below = |v: &Value| match tail {
        Some(tail) => sum_of(v, tail),
        None => v.as_i64().unwrap_or(0),
    };
    if first == "*" {
        return match value {
            Value::Array(items) => items
                .iter()
                .fold(0i64, |acc, v| acc.saturating_add(below(v))),
            _ => 0,
        };
    }
    step(value, first).map_or(0, below)
}

/// The normalized result of a rule that holds.
fn decided(rule: &PhaseRule, object: &Value, evidence: Evidence<'_>) -> Normalized {
    let from = |p: &Option<String>| {
        p.as_deref()
            .and_then(|p| at(object, p))
            .and_then(Value::as_str)
            .filter(|v| !v.is_empty())
            .map(str::to_string)
    };
    let (mut raw, mut reason, mut message, mut time) = (String::new(), None, None, None);
    match evidence {
        Evidence::Condition(c) => {
            let s = |k: &str| {
                c.get(k)
                    .and_then(Value::as_str)
                    .filter(|v| !v.is_empty())
                    .map(str::to_string)
            };
            raw = s("type").unwrap_or_default();
            reason = s("reason");
            message = s("message");
            time = s("lastTransitionTime");
        }
        Evidence::Field(value) => raw = value.into_owned(),
        Evidence::Other => {}
    }
    Normalized {
        phase: rule.phase,
        raw_phase: rule.raw.clone().unwrap_or(raw),
        reason: from(&rule.reason_path).or(reason),
        message: from(&rule.message_path).or(message),
        transition_time: from(&rule.time_path).or(time),
    }
}

#[cfg(test)]
mod tests;
