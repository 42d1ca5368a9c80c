//! A request for jobs, read from a URL's query string and checked before any job is looked at.
//!
//! `cluster`, `namespace`, `kind` and `phase` take lists (repeated, or comma-separated);
//! `labelSelector` is Kubernetes' syntax; `name` is a prefix; `sort` is `cluster` (the
//! default), `name`, `created` or `finished`, `-` in front for descending; `limit` is 1 to
//! [`MAX_LIMIT`] (default [`DEFAULT_LIMIT`]); `continue` is the token a previous page gave.
//! Anything else, or a value out of shape, is refused with the parameter named: a client's
//! typo must not silently widen what it sees.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};

use jobrelay_contract::event::Phase;
use jobrelay_contract::label_selector::Selector;

/// The most jobs one page holds.
pub const MAX_LIMIT: usize = 1_000;
/// A page's size when the request does not say.
pub const DEFAULT_LIMIT: usize = 100;
/// The longest query string read (a huge one is refused, not parsed).
pub const MAX_QUERY_BYTES: usize = 16 * 1024;
/// The most values one list parameter takes.
pub const MAX_VALUES: usize = 256;

/// Why a request is refused; the message names the parameter.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueryError {
    /// The query string is past [`MAX_QUERY_BYTES`] (its length is the payload).
    #[error("the query is {0} bytes; at most {MAX_QUERY_BYTES} are read")]
    TooLong(usize),
    /// A parameter this API does not take (its name is the payload).
    #[error(
        "`{0}` is not a parameter (cluster, namespace, kind, phase, labelSelector, name, sort, \
         limit, continue)"
    )]
    Unknown(String),
    /// A known parameter with a value out of shape.
    #[error("{param}: {why}")]
    Invalid {
        /// The parameter's name as the URL spells it.
        param: &'static str,
        /// What is wrong with its value.
        why: String,
    },
}

fn invalid(param: &'static str, why: impl Into<String>) -> QueryError {
    QueryError::Invalid {
        param,
        why: why.into(),
    }
}

/// What jobs are ordered by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SortField {
    /// Cluster, namespace, name.
    Cluster,
    /// Name, namespace, cluster.
    Name,
    /// Creation time, then cluster, namespace, name.
    Created,
    /// End time (jobs not finished last), then cluster, namespace, name.
    Finished,
}

/// An order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sort {
    /// What jobs are ordered by.
    pub field: SortField,
    /// Largest first (`-` in front of the field's name).
    pub descending: bool,
}

impl Sort {
    fn parse(text: &str) -> Result<Sort, QueryError> {
        let (descending, name) = match text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let field = match name {
            "cluster" => SortField::Cluster,
            "name" => SortField::Name,
            "created" => SortField::Created,
            "finished" => SortField::Finished,
            _ => {
                return Err(invalid(
                    "sort",
                    format!(
                        "`{text}` is not an order (cluster, name, created, finished; `-` in \
                         front for descending)"
                    ),
                ));
            }
        };
        Ok(Sort { field, descending })
    }

    fn text(self) -> String {
        let name = match self.field {
            SortField::Cluster => "cluster",
            SortField::Name => "name",
            SortField::Created => "created",
            SortField::Finished => "finished",
        };
        if self.descending {
            format!("-{name}")
        } else {
            name.to_string()
        }
    }
}

/// Where a job stands in an order: the key a page ends at, and the next begins after.
///
/// `a`, `b`, `c` are the names in the order's precedence: cluster, namespace, name for every
/// order but `name`'s, which is name, namespace, cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Position {
    /// The job lacks the time sorted by (not finished, for `finished`): such jobs come after
    /// all others, in either direction.
    pub missing: bool,
    /// The time sorted by, in seconds since the epoch; 0 for the orders by name.
    pub time: u32,
    /// The first name in the order's precedence.
    pub a: String,
    /// The second.
    pub b: String,
    /// The third.
    pub c: String,
    /// Tells apart a deleted job and a new one of the same name.
    pub uid: String,
}

/// The continue token's contents.
#[derive(Debug, Serialize, Deserialize)]
struct Token {
    /// The order it was made for.
    sort: String,
    /// The filters it was made for (their hash).
    filters: u64,
    after: Position,
}

/// One request, checked.
#[derive(Debug, Clone, Default)]
pub struct JobQuery {
    /// Only jobs on these clusters; every cluster when empty.
    pub clusters: Vec<String>,
    /// Only jobs in these namespaces; every namespace when empty.
    pub namespaces: Vec<String>,
    /// Configured kind names.
    pub kinds: Vec<String>,
    /// Only jobs in these phases; every phase when empty.
    pub phases: Vec<Phase>,
    /// Only jobs whose labels match (`labelSelector`).
    pub selector: Option<Selector>,
    /// The raw selector, for the continue token's filter hash.
    selector_text: String,
    /// Only jobs whose name starts with this (`name`).
    pub name_prefix: Option<String>,
    /// Only jobs one of these timers fires on (`timer`); `*`: any timer.
    pub timers: Vec<String>,
    /// The order asked for; `cluster` when none was.
    pub sort: Option<Sort>,
    /// The most jobs on the page, 1 to [`MAX_LIMIT`].
    pub limit: usize,
    /// Jobs after this one (from `continue`).
    pub after: Option<Position>,
}

impl JobQuery {
    /// Reads a query string (without the `?`).
    pub fn parse(query: &str) -> Result<JobQuery, QueryError> {
        if query.len() > MAX_QUERY_BYTES {
            return Err(QueryError::TooLong(query.len()));
        }
        let mut q = JobQuery {
            limit: DEFAULT_LIMIT,
            ..JobQuery::default()
        };
        let mut token = None;
        let mut seen = std::collections::BTreeSet::new();
        for (key, value) in form_urlencoded::parse(query.as_bytes()) {
            let list = match &*key {
                "cluster" => Some(("cluster", &mut q.clusters)),
                "namespace" => Some(("namespace", &mut q.namespaces)),
                "kind" => Some(("kind", &mut q.kinds)),
                "timer" => Some(("timer", &mut q.timers)),
                _ => None,
            };
            if let Some((param, values)) = list {
                add_values(param, values, &value)?;
                continue;
            }
            let once = |param: &'static str, seen: &mut std::collections::BTreeSet<&str>| {
                if seen.insert(param) {
                    Ok(())
                } else {
                    Err(invalid(param, "given more than once"))
                }
            };
            match &*key {
                "phase" => {
                    let mut texts = Vec::new();
                    add_values("phase", &mut texts, &value)?;
                    for text in texts {
                        q.phases.push(phase_of(&text)?);
                    }
                    if q.phases.len() > MAX_VALUES {
                        return Err(invalid("phase", "too many values"));
                    }
                }
                "labelSelector" => {
                    once("labelSelector", &mut seen)?;
                    q.selector = Some(
                        Selector::parse(&value)
                            .map_err(|e| invalid("labelSelector", e.to_string()))?,
                    );
                    q.selector_text = value.into_owned();
                }
                "name" => {
                    once("name", &mut seen)?;
                    if !value.is_empty() {
                        q.name_prefix = Some(value.into_owned());
                    }
                }
                "sort" => {
                    once("sort", &mut seen)?;
                    q.sort = Some(Sort::parse(&value)?);
                }
                "limit" => {
                    once("limit", &mut seen)?;
                    q.limit = value
                        .parse::<usize>()
                        .ok()
                        .filter(|n| (1..=MAX_LIMIT).contains(n))
                        .ok_or_else(|| {
                            invalid(
                                "limit",
                                format!("`{value}` is not a number from 1 to {MAX_LIMIT}"),
                            )
                        })?;
                }
                "continue" => {
                    once("continue", &mut seen)?;
                    if !value.is_empty() {
                        token = Some(value.into_owned());
                    }
                }
                other => return Err(QueryError::Unknown(other.to_string())),
            }
        }
        if let Some(token) = token {
            q.after = Some(q.read_token(&token)?);
        }
        Ok(q)
    }

    /// The order asked for, or the default.
    pub fn order(&self) -> Sort {
        self.sort.unwrap_or(Sort {
            field: SortField::Cluster,
            descending: false,
        })
    }

    /// The token that continues after `last` with the same filters and order.
    pub fn token_after(&self, last: Position) -> String {
        let token = Token {
            sort: self.order().text(),
            filters: self.filter_hash(),
            after: last,
        };
        let json = serde_json::to_vec(&token).unwrap_or_default();
        URL_SAFE_NO_PAD.encode(json)
    }

    fn read_token(&self, text: &str) -> Result<Position, QueryError> {
        let bad = || {
            invalid(
                "continue",
                "not a token this API gave (or it was cut short)",
            )
        };
        let json = URL_SAFE_NO_PAD.decode(text).map_err(|_| bad())?;
        let token: Token = serde_json::from_slice(&json).map_err(|_| bad())?;
        if token.sort != self.order().text() || token.filters != self.filter_hash() {
            return Err(invalid(
                "continue",
                "the token was made for other filters or another order: a page continues only \
                 with the query that began it",
            ));
        }
        Ok(token.after)
    }

    /// A hash of the filters (FNV-1a over their text): the same on every replica and every
    /// start, so a token stays good across them.
    fn filter_hash(&self) -> u64 {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        let mut feed = |text: &str| {
            for byte in text.bytes().chain(std::iter::once(0xff)) {
                hash ^= u64::from(byte);
                hash = hash.wrapping_mul(0x0100_0000_01b3);
            }
        };
        let sorted = |values: &[String]| {
            let mut v = values.to_vec();
            v.sort();
            v.dedup();
            v.join(",")
        };
        feed(&sorted(&self.clusters));
        feed(&sorted(&self.namespaces));
        feed(&sorted(&self.kinds));
        let phases: Vec<String> = self.phases.iter().map(|p| p.to_string()).collect();
        feed(&sorted(&phases));
        feed(&self.selector_text);
        feed(self.name_prefix.as_deref().unwrap_or(""));
        feed(&sorted(&self.timers));
        hash
    }
}

/// Adds comma-separated values; empty ones are refused.
fn add_values(param: &'static str, values: &mut Vec<String>, text: &str) -> Result<(), QueryError> {
    for value in text.split(',') {
        let value = value.trim();
        if value.is_empty() {
            return Err(invalid(param, "an empty value"));
        }
        values.push(value.to_string());
        if values.len() > MAX_VALUES {
            return Err(invalid(param, format!("more than {MAX_VALUES} values")));
        }
    }
    Ok(())
}

fn phase_of(text: &str) -> Result<Phase, QueryError> {
    Phase::ALL
        .into_iter()
        .find(|p| p.as_str() == text)
        .ok_or_else(|| {
            let names: Vec<&str> = Phase::ALL.iter().map(|p| p.as_str()).collect();
            invalid(
                "phase",
                format!("`{text}` is not a phase ({})", names.join(", ")),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_take_repeats_and_commas() {
        let q = JobQuery::parse("cluster=a,b&cluster=c&phase=failed,running&limit=5").unwrap();
        assert_eq!(q.clusters, ["a", "b", "c"]);
        assert_eq!(q.phases, [Phase::Failed, Phase::Running]);
        assert_eq!(q.limit, 5);
        assert_eq!(q.order().field, SortField::Cluster);
    }

    #[test]
    fn bad_values_name_their_parameter() {
        let cases = [
            ("phase=runing", "phase: `runing` is not a phase"),
            ("limit=0", "limit: `0` is not a number from 1 to 1000"),
            ("limit=5000", "limit: `5000`"),
            ("limit=ten", "limit: `ten`"),
            ("sort=size", "sort: `size` is not an order"),
            ("labelSelector=team%3D%3D%3D", "labelSelector:"),
            ("cluster=a,,b", "cluster: an empty value"),
            ("continue=%%%", "continue: not a token"),
            ("continue=eyJ4IjoxfQ", "continue: not a token"),
            ("clusters=a", "`clusters` is not a parameter"),
            ("sort=name&sort=created", "sort: given more than once"),
        ];
        for (query, expected) in cases {
            let error = JobQuery::parse(query).expect_err(query).to_string();
            assert!(error.contains(expected), "{query}: {error}");
        }
    }

    #[test]
    fn a_huge_query_is_refused_unread() {
        let long = format!("name={}", "x".repeat(MAX_QUERY_BYTES));
        assert!(matches!(
            JobQuery::parse(&long),
            Err(QueryError::TooLong(_))
        ));
        let many = (0..=MAX_VALUES)
            .map(|i| format!("ns{i}"))
            .collect::<Vec<_>>();
        let error = JobQuery::parse(&format!("namespace={}", many.join(","))).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("namespace: more than 256 values")
        );
    }

    #[test]
    fn a_token_continues_only_its_own_query() {
        let q = JobQuery::parse("phase=failed&sort=-created").unwrap();
        let position = Position {
            missing: false,
            time: 7,
            a: "c".into(),
            b: "ns".into(),
            c: "job".into(),
            uid: "u".into(),
        };
        let token = q.token_after(position.clone());
        let again =
            JobQuery::parse(&format!("phase=failed&sort=-created&continue={token}")).unwrap();
        assert_eq!(again.after, Some(position));
        // The same filters in another spelling are the same query.
        let spelled = JobQuery::parse(&format!(
            "sort=-created&phase=failed&continue={token}&limit=3"
        ))
        .unwrap();
        assert!(spelled.after.is_some());
        for other in ["phase=running&sort=-created", "phase=failed&sort=created"] {
            let error = JobQuery::parse(&format!("{other}&continue={token}")).unwrap_err();
            assert!(error.to_string().contains("other filters or another order"));
        }
    }
}
