//! Label and field selectors, as accepted by list and watch.
//!
//! The daemon narrows its watches with selectors, so the simulator must filter exactly like the
//! apiserver: same syntax (`k=v`, `k==v`, `k!=v`, `k`, `!k`, `k in (a,b)`, `k notin (a)`,
//! comma-joined AND), same 400 on a malformed selector, and only the field labels the real
//! server supports (an unsupported field selector is an error there, so it is one here too).

use serde_json::Value;

use super::status::SimError;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    Exists(String),
    NotExists(String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
}

impl Requirement {
    fn matches(&self, lookup: &dyn Fn(&str) -> Option<String>) -> bool {
        match self {
            Requirement::Equals(k, v) => lookup(k).as_deref() == Some(v.as_str()),
            // `k!=v` also matches objects without the label, as in Kubernetes.
            Requirement::NotEquals(k, v) => lookup(k).as_deref() != Some(v.as_str()),
            Requirement::Exists(k) => lookup(k).is_some(),
            Requirement::NotExists(k) => lookup(k).is_none(),
            Requirement::In(k, vs) => lookup(k).is_some_and(|x| vs.contains(&x)),
            Requirement::NotIn(k, vs) => lookup(k).is_none_or(|x| !vs.contains(&x)),
        }
    }
}

/// A parsed `labelSelector`: every requirement must hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

impl LabelSelector {
    /// Parses the `labelSelector` query syntax.
    pub fn parse(input: &str) -> Result<LabelSelector, SimError> {
        let mut requirements = Vec::new();
        for term in split_terms(input)? {
            requirements.push(parse_label_term(&term)?);
        }
        Ok(LabelSelector { requirements })
    }

    /// Whether the selector has no requirements (matches everything).
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether an object's `metadata.labels` satisfy the selector.
    pub fn matches(&self, object: &Value) -> bool {
        let labels = object.pointer("/metadata/labels");
        let lookup = |key: &str| -> Option<String> {
            labels
                .and_then(|l| l.get(key))
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        self.requirements.iter().all(|r| r.matches(&lookup))
    }
}

/// Splits on commas that are not inside parentheses.
fn split_terms(input: &str) -> Result<Vec<String>, SimError> {
    let mut terms = Vec::new();
    let mut depth = 0usize;
    let mut current = String::new();
    for c in input.chars() {
        match c {
            '(' => {
                depth += 1;
                current.push(c);
            }
            ')' => {
                depth = depth
                    .checked_sub(1)
                    .ok_or_else(|| parse_error(input, "unbalanced parenthesis"))?;
                current.push(c);
            }
            ',' if depth == 0 => terms.push(std::mem::take(&mut current)),
            _ => current.push(c),
        }
    }
    if depth != 0 {
        return Err(parse_error(input, "unbalanced parenthesis"));
    }
    terms.push(current);
    let terms: Vec<String> = terms.into_iter().map(|t| t.trim().to_string()).collect();
    if terms.len() == 1 && terms[0].is_empty() {
        return Ok(Vec::new());
    }
    if terms.iter().any(String::is_empty) {
        return Err(parse_error(input, "empty requirement"));
    }
    Ok(terms)
}

fn parse_error(selector: &str, why: &str) -> SimError {
    SimError::bad_request(format!(
        "unable to parse requirement: {why} in selector \"{selector}\""
    ))
}

fn parse_label_term(term: &str) -> Result<Requirement, SimError> {
    if let Some(key) = term.strip_prefix('!') {
        return Ok(Requirement::NotExists(label_key(key.trim(), term)?));
    }
    if let Some((key, value)) = term.split_once("!=") {
        return Ok(Requirement::NotEquals(
            label_key(key.trim(), term)?,
            label_value(value.trim(), term)?,
        ));
    }
    if let Some((key, value)) = term.split_once("==") {
        return Ok(Requirement::Equals(
            label_key(key.trim(), term)?,
            label_value(value.trim(), term)?,
        ));
    }
    if let Some((key, value)) = term.split_once('=') {
        return Ok(Requirement::Equals(
            label_key(key.trim(), term)?,
            label_value(value.trim(), term)?,
        ));
    }
    // Set-based: `key in (a,b)` / `key notin (a)`.
    let mut words = term.splitn(2, char::is_whitespace);
    let key = words.next().unwrap_or_default();
    let rest = words.next().map(str::trim).unwrap_or_default();
    if rest.is_empty() {
        return Ok(Requirement::Exists(label_key(key, term)?));
    }
    let (negate, list) = if let Some(list) = rest.strip_prefix("notin") {
        (true, list)
    } else if let Some(list) = rest.strip_prefix("in") {
        (false, list)
    } else {
        return Err(parse_error(term, "unknown operator"));
    };
    let list = list.trim();
    let inner = list
        .strip_prefix('(')
        .and_then(|l| l.strip_suffix(')'))
        .ok_or_else(|| parse_error(term, "expected a parenthesised value list"))?;
    let mut values = Vec::new();
    for value in inner.split(',') {
        let value = value.trim();
        if value.is_empty() && inner.trim().is_empty() {
            return Err(parse_error(term, "empty value list"));
        }
        values.push(label_value(value, term)?);
    }
    let key = label_key(key, term)?;
    Ok(if negate {
        Requirement::NotIn(key, values)
    } else {
        Requirement::In(key, values)
    })
}

/// Label keys: optional DNS prefix and a name of letters, digits, `-`, `_`, `.`.
fn label_key(key: &str, term: &str) -> Result<String, SimError> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    let name_ok =
        !name.is_empty() && name.len() <= 63 && name.chars().all(is_label_char) && alnum_ends(name);
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
    });
    if name_ok && prefix_ok {
        Ok(key.to_string())
    } else {
        Err(parse_error(term, &format!("invalid label key \"{key}\"")))
    }
}

/// Label values: empty, or up to 63 label characters starting and ending alphanumeric.
fn label_value(value: &str, term: &str) -> Result<String, SimError> {
    if value.is_empty()
        || (value.len() <= 63 && value.chars().all(is_label_char) && alnum_ends(value))
    {
        Ok(value.to_string())
    } else {
        Err(parse_error(
            term,
            &format!("invalid label value \"{value}\""),
        ))
    }
}

fn is_label_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.'
}

fn alnum_ends(s: &str) -> bool {
    let first = s.chars().next().is_some_and(|c| c.is_ascii_alphanumeric());
    let last = s.chars().last().is_some_and(|c| c.is_ascii_alphanumeric());
    first && last
}

/// A parsed `fieldSelector`: equality and inequality on supported field labels.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSelector {
    requirements: Vec<Requirement>,
}

impl FieldSelector {
    /// Parses `fieldSelector`. `plural` decides which field labels are supported:
    /// `metadata.name` and `metadata.namespace` for every resource, plus the pod fields
    /// the apiserver indexes (`spec.nodeName`, `status.phase`, ...).
    pub fn parse(input: &str, plural: &str) -> Result<FieldSelector, SimError> {
        let mut requirements = Vec::new();
        for term in split_terms(input)? {
            let (key, value, negate) = if let Some((k, v)) = term.split_once("!=") {
                (k, v, true)
            } else if let Some((k, v)) = term.split_once("==") {
                (k, v, false)
            } else if let Some((k, v)) = term.split_once('=') {
                (k, v, false)
            } else {
                return Err(SimError::bad_request(format!(
                    "invalid field selector: '{term}'"
                )));
            };
            let key = key.trim().to_string();
            if !field_supported(&key, plural) {
                return Err(SimError::bad_request(format!(
                    "field label not supported: {key}"
                )));
            }
            let value = value.trim().to_string();
            requirements.push(if negate {
                Requirement::NotEquals(key, value)
            } else {
                Requirement::Equals(key, value)
            });
        }
        Ok(FieldSelector { requirements })
    }

    /// Whether the selector has no requirements.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether an object's fields satisfy the selector. Missing fields compare as `""`,
    /// like the apiserver's field sets.
    pub fn matches(&self, object: &Value) -> bool {
        let lookup = |path: &str| -> Option<String> {
            let pointer = format!("/{}", path.replace('.', "/"));
            Some(match object.pointer(&pointer) {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => String::new(),
                Some(other) => other.to_string(),
            })
        };
        self.requirements.iter().all(|r| r.matches(&lookup))
    }
}

fn field_supported(key: &str, plural: &str) -> bool {
    const COMMON: &[&str] = &["metadata.name", "metadata.namespace"];
    const POD: &[&str] = &[
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    ];
    COMMON.contains(&key)
        || (plural == "pods" && POD.contains(&key))
        || (plural == "jobs" && key == "status.successful")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(labels: Value) -> Value {
        json!({ "metadata": { "name": "a", "namespace": "ns", "labels": labels } })
    }

    #[test]
    fn equality_and_existence() {
        let o = obj(json!({ "app": "x", "tier": "db" }));
        for (sel, want) in [
            ("app=x", true),
            ("app==x", true),
            ("app!=x", false),
            ("app!=y", true),
            ("missing!=y", true),
            ("app", true),
            ("!app", false),
            ("!missing", true),
            ("app=x,tier=db", true),
            ("app=x,tier=web", false),
            ("", true),
        ] {
            assert_eq!(
                LabelSelector::parse(sel).unwrap().matches(&o),
                want,
                "{sel}"
            );
        }
    }

    #[test]
    fn set_based() {
        let o = obj(json!({ "env": "prod", "example.com/role": "worker" }));
        for (sel, want) in [
            ("env in (prod,dev)", true),
            ("env in (dev)", false),
            ("env notin (dev, qa)", true),
            ("env notin (prod)", false),
            ("missing notin (prod)", true),
            ("missing in (prod)", false),
            ("example.com/role in (worker),env", true),
        ] {
            assert_eq!(
                LabelSelector::parse(sel).unwrap().matches(&o),
                want,
                "{sel}"
            );
        }
    }

    #[test]
    fn malformed_selectors_are_errors() {
        for sel in [
            "app in (x",
            "a,,b",
            "app in x",
            "=x",
            "bad key=x",
            "app in ()",
        ] {
            let err = LabelSelector::parse(sel).unwrap_err();
            assert_eq!(err.code, 400, "{sel}");
        }
    }

    #[test]
    fn field_selectors() {
        let o = json!({ "metadata": { "name": "a", "namespace": "ns" }, "status": { "phase": "Running" } });
        assert!(
            FieldSelector::parse("metadata.name=a", "jobs")
                .unwrap()
                .matches(&o)
        );
        assert!(
            !FieldSelector::parse("metadata.name!=a", "jobs")
                .unwrap()
                .matches(&o)
        );
        assert!(
            FieldSelector::parse("metadata.namespace==ns,metadata.name=a", "jobs")
                .unwrap()
                .matches(&o)
        );
        assert!(
            FieldSelector::parse("status.phase=Running", "pods")
                .unwrap()
                .matches(&o)
        );
        assert_eq!(
            FieldSelector::parse("status.phase=Running", "leases")
                .unwrap_err()
                .code,
            400
        );
        assert_eq!(
            FieldSelector::parse("spec.foo=1", "pods").unwrap_err().code,
            400
        );
    }
}
