//! A Kubernetes label selector: its syntax checked before any API server sees it, and matched
//! against a job's labels where jobrelay itself selects (a plugin's `filter.labels`).
//!
//! A selector the API server cannot parse makes every list and watch of every kind fail, on
//! every cluster, forever: delivery stops everywhere while the config looks accepted. So the
//! main file's `watch.label_selector` is checked when the file is read (by `jobrelay check` and
//! the running daemon alike), and a bad one is refused with the last good file kept. A
//! plugin's filter is parsed by the same code, so the two accept exactly the same texts.
//!
//! The grammar is Kubernetes' (`k8s.io/apimachinery/pkg/labels`): requirements separated by
//! commas, each `key`, `!key`, `key=value`, `key==value`, `key!=value`, `key in (v, …)` or
//! `key notin (v, …)`. Keys are an optional DNS-subdomain prefix and `/`, then a name of at
//! most 63 characters; values are at most 63 characters, possibly empty.

use std::collections::BTreeMap;

/// Why a selector is refused: its shape, or which requirement is wrong and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// Nothing but whitespace; to select every job the setting is left out instead.
    #[error("is empty; leave it out to select every job")]
    Empty,
    /// A `(` inside a value list; Kubernetes' grammar has one level.
    #[error("nested parentheses")]
    NestedParentheses,
    /// A `)` with no value list open.
    #[error("a `)` without its `(`")]
    UnopenedParenthesis,
    /// A value list still open at the end of the text.
    #[error("a `(` without its `)`")]
    UnclosedParenthesis,
    /// One comma-separated requirement is wrong.
    #[error("`{requirement}`: {why}")]
    Requirement {
        /// The requirement as written, trimmed.
        requirement: String,
        /// What is wrong with it.
        why: RequirementError,
    },
}

/// What is wrong with one requirement; the message names the key or value at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequirementError {
    /// Nothing between two commas, or after the last one.
    #[error("empty requirement (two commas in a row, or a trailing comma)")]
    Empty,
    /// `in` or `notin` not followed by a parenthesized list.
    #[error("`{op}` needs a list of values in parentheses")]
    NoValueList {
        /// The operator, `in` or `notin`.
        op: &'static str,
    },
    /// `in ()` or `notin ()`: a list with no value in it.
    #[error("`{op}` needs at least one value")]
    NoValue {
        /// The operator, `in` or `notin`.
        op: &'static str,
    },
    /// A key followed by something that is not an operator.
    #[error("expected `=`, `==`, `!=`, `in` or `notin` after the key, found `{rest}`")]
    NoOperator {
        /// The text after the key.
        rest: String,
    },
    /// The part of a key before `/` is not a DNS subdomain.
    #[error(
        "key prefix `{prefix}` is not a DNS subdomain (lowercase letters, digits, `-` and `.`, \
         at most 253 characters)"
    )]
    KeyPrefix {
        /// The prefix, without its `/`.
        prefix: String,
    },
    /// A requirement without a key (`=x`, a lone `!`), or a prefix with nothing after its `/`.
    #[error("a key is missing")]
    NoKey,
    /// The name part of a key (after any prefix) is not a valid label name.
    #[error("key `{key}`: {why}")]
    Key {
        /// The whole key, prefix included.
        key: String,
        /// What is wrong with its name part.
        why: NameError,
    },
    /// A value is not a valid label value.
    #[error("value `{value}`: {why}")]
    Value {
        /// The value as written.
        value: String,
        /// What is wrong with it.
        why: NameError,
    },
}

/// What is wrong with a key's name part or a value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// Past the 63 characters Kubernetes allows in a label name or value.
    #[error("longer than 63 characters")]
    TooLong,
    /// A character other than letters, digits, `-`, `_` and `.`, or a first or last character
    /// that is not a letter or digit.
    #[error(
        "must be letters, digits, `-`, `_` and `.`, starting and ending with a letter or digit"
    )]
    Characters,
}

/// Checks `selector`; the error says which requirement is wrong and why.
pub fn check(selector: &str) -> Result<(), SelectorError> {
    Selector::parse(selector).map(|_| ())
}

/// A parsed selector: every requirement must hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selector(Vec<Requirement>);

/// One requirement, as Kubernetes reads it: `!=` and `notin` also hold for a job without the
/// key, `in` and `=` only for one that has it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    Exists(String),
    Absent(String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
}

impl Selector {
    /// Parses `selector`; the error says which requirement is wrong and why.
    pub fn parse(selector: &str) -> Result<Selector, SelectorError> {
        if selector.trim().is_empty() {
            return Err(SelectorError::Empty);
        }
        split_requirements(selector)?
            .into_iter()
            .map(|requirement| {
                let requirement = requirement.trim();
                parse_requirement(requirement).map_err(|why| SelectorError::Requirement {
                    requirement: requirement.to_string(),
                    why,
                })
            })
            .collect::<Result<_, _>>()
            .map(Selector)
    }

    /// Whether `labels` satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.matches_with(|key| labels.get(key).map(String::as_str))
    }

    /// Whether labels, read through `value_of` (a key's value, if the label is set), satisfy
    /// every requirement: for labels kept in another shape than a map.
    pub fn matches_with<'a>(&self, value_of: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.0.iter().all(|r| match r {
            Requirement::Exists(key) => value_of(key).is_some(),
            Requirement::Absent(key) => value_of(key).is_none(),
            Requirement::In(key, values) => {
                value_of(key).is_some_and(|v| values.iter().any(|x| x == v))
            }
            Requirement::NotIn(key, values) => {
                value_of(key).is_none_or(|v| !values.iter().any(|x| x == v))
            }
        })
    }
}

/// Splits at commas outside parentheses.
fn split_requirements(selector: &str) -> Result<Vec<&str>, SelectorError> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0u32, 0usize);
    for (i, c) in selector.char_indices() {
        match c {
            '(' if depth == 0 => depth = 1,
            '(' => return Err(SelectorError::NestedParentheses),
            ')' if depth == 1 => depth = 0,
            ')' => return Err(SelectorError::UnopenedParenthesis),
            ',' if depth == 0 => {
                parts.push(&selector[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(SelectorError::UnclosedParenthesis);
    }
    parts.push(&selector[start..]);
    Ok(parts)
}

fn parse_requirement(req: &str) -> Result<Requirement, RequirementError> {
    if req.is_empty() {
        return Err(RequirementError::Empty);
    }
    if let Some(key) = req.strip_prefix('!') {
        let key = key.trim();
        check_key(key)?;
        return Ok(Requirement::Absent(key.to_string()));
    }
    let end = req
        .find(|c: char| c.is_whitespace() || matches!(c, '=' | '!' | '('))
        .unwrap_or(req.len());
    let (key, rest) = (&req[..end], req[end..].trim_start());
    check_key(key)?;
    let key = key.to_string();
    if rest.is_empty() {
        return Ok(Requirement::Exists(key));
    }
    for op in ["==", "!=", "="] {
        if let Some(value) = rest.strip_prefix(op) {
            let value = value.trim();
            check_value(value)?;
            let values = vec![value.to_string()];
            return Ok(if op == "!=" {
                Requirement::NotIn(key, values)
            } else {
                Requirement::In(key, values)
            });
        }
    }
    for op in ["notin", "in"] {
        if let Some(set) = rest.strip_prefix(op)
            && (set.starts_with('(') || set.starts_with(char::is_whitespace))
        {
            let set = set.trim();
            let inner = set
                .strip_prefix('(')
                .and_then(|s| s.strip_suffix(')'))
                .ok_or(RequirementError::NoValueList { op })?;
            if inner.trim().is_empty() {
                return Err(RequirementError::NoValue { op });
            }
            let values = inner
                .split(',')
                .map(|v| check_value(v.trim()).map(|()| v.trim().to_string()))
                .collect::<Result<Vec<_>, _>>()?;
            return Ok(if op == "notin" {
                Requirement::NotIn(key, values)
            } else {
                Requirement::In(key, values)
            });
        }
    }
    Err(RequirementError::NoOperator {
        rest: rest.to_string(),
    })
}

fn check_key(key: &str) -> Result<(), RequirementError> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        let ok = !prefix.is_empty()
            && prefix.len() <= 253
            && prefix.split('.').all(|label| {
                !label.is_empty()
                    && label.len() <= 63
                    && label
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                    && !label.starts_with('-')
                    && !label.ends_with('-')
            });
        if !ok {
            return Err(RequirementError::KeyPrefix {
                prefix: prefix.to_string(),
            });
        }
    }
    if name.is_empty() {
        return Err(RequirementError::NoKey);
    }
    check_name(name).map_err(|why| RequirementError::Key {
        key: key.to_string(),
        why,
    })
}

fn check_value(value: &str) -> Result<(), RequirementError> {
    if value.is_empty() {
        return Ok(());
    }
    check_name(value).map_err(|why| RequirementError::Value {
        value: value.to_string(),
        why,
    })
}

/// A key's name part or a value: at most 63 characters, alphanumerics with `-`, `_` and `.`
/// inside.
fn check_name(s: &str) -> Result<(), NameError> {
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    if s.len() > 63 {
        return Err(NameError::TooLong);
    }
    if !s
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        || !edge(s.chars().next())
        || !edge(s.chars().last())
    {
        return Err(NameError::Characters);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_selectors_pass() {
        for s in [
            "team=ml",
            "team==ml,!skip-relay",
            "team != ml",
            "env in (prod, staging),tier notin (cache)",
            "jobrelay.io/watch",
            "app.kubernetes.io/name=trainer",
            "a=",
            "x in (a,b,c),y,!z",
        ] {
            assert_eq!(check(s), Ok(()), "{s}");
        }
    }

    #[test]
    fn selectors_match_as_kubernetes_reads_them() {
        let labels: BTreeMap<String, String> = [("team", "ml"), ("env", "prod")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        for (s, expected) in [
            ("team=ml", true),
            ("team==ml", true),
            ("team=cv", false),
            ("team!=cv", true),
            ("team!=ml", false),
            ("owner!=x", true),
            ("team", true),
            ("owner", false),
            ("!owner", true),
            ("!team", false),
            ("env in (staging, prod)", true),
            ("env in (staging)", false),
            ("owner in (x)", false),
            ("env notin (staging)", true),
            ("env notin (prod,staging)", false),
            ("owner notin (x)", true),
            ("team=ml,env in (prod)", true),
            ("team=ml,env in (dev)", false),
            ("team=", false),
        ] {
            let selector = Selector::parse(s).expect(s);
            assert_eq!(selector.matches(&labels), expected, "{s}");
        }
        let empty_value: BTreeMap<String, String> =
            [("team".to_string(), String::new())].into_iter().collect();
        assert!(
            Selector::parse("team=")
                .expect("parses")
                .matches(&empty_value)
        );
    }

    #[test]
    fn invalid_selectors_are_named() {
        for (s, needle) in [
            ("", "empty"),
            ("team=ml,", "empty requirement"),
            ("team===ml", "value"),
            ("team=m l", "value"),
            ("env in prod", "parentheses"),
            ("env in ()", "at least one"),
            ("env in (a,(b))", "nested"),
            ("env in (a", "without its"),
            ("Bad_Prefix.io/x=1", "prefix"),
            ("=ml", "missing"),
            ("team ~ ml", "expected"),
            ("-team=ml", "letters"),
            (&format!("k={}", "v".repeat(64)), "63"),
        ] {
            let err = check(s).expect_err(s).to_string();
            assert!(err.contains(needle), "{s}: {err}");
        }
    }
}
