//! List with `limit`/`continue` pagination and resourceVersion semantics.
//!
//! kube's watcher lists in pages of 500 and then watches from the list's resourceVersion, so
//! pagination must behave like etcd-backed lists: every page of one list is served from the
//! same snapshot (the RV of the first page), the continue token is opaque, and once that RV
//! has been compacted the next page is `410 Expired` and the client starts over.

use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::resources::Gvr;
use super::selectors::{FieldSelector, LabelSelector};
use super::status::SimError;
use super::store::StoreInner;

/// What a list request asks for.
#[derive(Clone, Debug, Default)]
pub(crate) struct ListQuery {
    pub namespace: Option<String>,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
    pub limit: Option<usize>,
    pub continue_token: Option<String>,
    /// `resourceVersion` with `resourceVersionMatch=Exact`: list as of that RV.
    pub exact_rv: Option<u64>,
}

/// One page of a list.
#[derive(Clone, Debug)]
pub(crate) struct ListPage {
    pub items: Vec<Arc<Value>>,
    pub resource_version: u64,
    pub continue_token: Option<String>,
    pub remaining: Option<usize>,
}

/// The decoded continue token: the snapshot RV and the last key returned.
#[derive(Serialize, Deserialize)]
struct ContinueToken {
    v: String,
    rv: u64,
    ns: String,
    name: String,
}

const TOKEN_VERSION: &str = "meta.k8s.io/v1";

fn encode_token(rv: u64, ns: &str, name: &str) -> String {
    let token = ContinueToken {
        v: TOKEN_VERSION.into(),
        rv,
        ns: ns.into(),
        name: name.into(),
    };
    // Serialising a plain struct of strings and integers cannot fail.
    let json = serde_json::to_vec(&token).unwrap_or_default();
    URL_SAFE_NO_PAD.encode(json)
}

fn decode_token(token: &str) -> Result<ContinueToken, SimError> {
    let invalid = || {
        SimError::bad_request("continue key is not valid: incorrect encoded start resourceVersion")
    };
    let raw = URL_SAFE_NO_PAD
        .decode(token.trim_end_matches('='))
        .map_err(|_| invalid())?;
    let token: ContinueToken = serde_json::from_slice(&raw).map_err(|_| invalid())?;
    if token.v != TOKEN_VERSION {
        return Err(invalid());
    }
    Ok(token)
}

/// Serves one page.
pub(crate) fn list(store: &StoreInner, gvr: &Gvr, query: &ListQuery) -> Result<ListPage, SimError> {
    let (snapshot_rv, after) = match &query.continue_token {
        Some(token) => {
            let t = decode_token(token)?;
            (t.rv, Some((t.ns, t.name)))
        }
        None => (query.exact_rv.unwrap_or(store.rv), None),
    };
    let expired = |horizon| {
        if query.continue_token.is_some() {
            SimError::expired(
                "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.",
            )
        } else {
            SimError::expired(format!(
                "too old resource version: {snapshot_rv} ({horizon})"
            ))
        }
    };
    let namespace = query.namespace.as_deref();
    let after = after
        .as_ref()
        .map(|(ns, name)| (ns.as_str(), name.as_str()));
    // A page of a snapshot nothing has changed since is read from the objects in place: a
    // page costs its own length, not the whole resource's (a 100,000-job list would otherwise
    // copy every key for each of its 200 pages).
    let (items, last_key, rest) = if store
        .unchanged_since(gvr, namespace, snapshot_rv)
        .map_err(expired)?
    {
        let objects = store
            .scan_after(gvr, namespace, after)
            .map(|(k, o)| ((k.namespace.as_str(), k.name.as_str()), o));
        page(objects, query)
    } else {
        let view = store
            .snapshot(gvr, namespace, snapshot_rv)
            .map_err(expired)?;
        let objects = view
            .iter()
            .map(|((ns, name), o)| ((ns.as_str(), name.as_str()), o))
            .filter(|(k, _)| after.is_none_or(|a| *k > a));
        page(objects, query)
    };
    let (continue_token, remaining) = match last_key {
        Some((ns, name)) if rest > 0 => {
            // Like the apiserver, only report a count when no selector makes it expensive.
            let count = (query.labels.is_empty() && query.fields.is_empty()).then_some(rest);
            (Some(encode_token(snapshot_rv, &ns, &name)), count)
        }
        _ => (None, None),
    };
    Ok(ListPage {
        items,
        resource_version: snapshot_rv,
        continue_token,
        remaining,
    })
}

/// The matching objects of `objects` (in key order) up to the query's limit, the key of the
/// last one when the limit cut the page, and how many matching objects are left after it —
/// counted only without selectors (the only case the count is reported); with them, 1 if any
/// is left, so a page never matches the rest of the resource.
fn page<'a>(
    objects: impl Iterator<Item = ((&'a str, &'a str), &'a Arc<Value>)>,
    query: &ListQuery,
) -> (Vec<Arc<Value>>, Option<(String, String)>, usize) {
    let selecting = !(query.labels.is_empty() && query.fields.is_empty());
    let mut matching =
        objects.filter(|(_, o)| !selecting || (query.labels.matches(o) && query.fields.matches(o)));
    let mut items = Vec::new();
    let mut last_key = None;
    let limit = query.limit.filter(|l| *l > 0);
    for ((ns, name), o) in matching.by_ref() {
        items.push(o.clone());
        if limit.is_some_and(|l| items.len() >= l) {
            last_key = Some((ns.to_string(), name.to_string()));
            break;
        }
    }
    let rest = if selecting {
        usize::from(matching.next().is_some())
    } else {
        matching.count()
    };
    (items, last_key, rest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::resources::ResourceKind;
    use crate::sim::store::Store;
    use crate::sim::writes::{CreateOptions, create};
    use serde_json::json;

    fn seeded(n: usize) -> Store {
        let store = Store::new(100, true);
        let kind = ResourceKind::new("batch", "v1", "Job", "jobs", true);
        store.write(|s| {
            for i in 0..n {
                let ns = if i % 2 == 0 { "a" } else { "b" };
                let obj = json!({ "metadata": { "name": format!("j{i}"), "labels": { "even": (i % 2 == 0).to_string() } } });
                create(s, &kind, ns, obj, CreateOptions::default()).unwrap();
            }
        });
        store
    }

    #[test]
    fn pages_are_consistent_and_ordered() {
        let store = seeded(7);
        let mut query = ListQuery {
            limit: Some(3),
            ..Default::default()
        };
        let mut names = Vec::new();
        let first = store.read(|s| list(s, &Gvr::BATCH_JOB, &query)).unwrap();
        assert_eq!(first.remaining, Some(4));
        let rv = first.resource_version;
        names.extend(
            first
                .items
                .iter()
                .map(|o| o["metadata"]["name"].as_str().unwrap().to_string()),
        );
        // A write between pages does not show up in later pages.
        let kind = ResourceKind::new("batch", "v1", "Job", "jobs", true);
        store.write(|s| {
            create(
                s,
                &kind,
                "z",
                json!({ "metadata": { "name": "late" } }),
                CreateOptions::default(),
            )
            .unwrap()
        });
        query.continue_token = first.continue_token;
        while query.continue_token.is_some() {
            let page = store.read(|s| list(s, &Gvr::BATCH_JOB, &query)).unwrap();
            assert_eq!(page.resource_version, rv);
            names.extend(
                page.items
                    .iter()
                    .map(|o| o["metadata"]["name"].as_str().unwrap().to_string()),
            );
            query.continue_token = page.continue_token;
        }
        assert_eq!(names, ["j0", "j2", "j4", "j6", "j1", "j3", "j5"]);
    }

    #[test]
    fn compacted_continue_is_expired() {
        let store = seeded(4);
        let query = ListQuery {
            limit: Some(1),
            ..Default::default()
        };
        let first = store.read(|s| list(s, &Gvr::BATCH_JOB, &query)).unwrap();
        let kind = ResourceKind::new("batch", "v1", "Job", "jobs", true);
        store.write(|s| {
            create(
                s,
                &kind,
                "z",
                json!({ "metadata": { "name": "x" } }),
                CreateOptions::default(),
            )
            .unwrap();
            s.compact();
        });
        let next = ListQuery {
            continue_token: first.continue_token,
            ..query
        };
        let err = store.read(|s| list(s, &Gvr::BATCH_JOB, &next)).unwrap_err();
        assert_eq!((err.code, err.reason.as_str()), (410, "Expired"));
        let bad = ListQuery {
            continue_token: Some("!!".into()),
            ..Default::default()
        };
        assert_eq!(
            store
                .read(|s| list(s, &Gvr::BATCH_JOB, &bad))
                .unwrap_err()
                .code,
            400
        );
    }

    /// Pages of a quiet store (read in place) and of one written to meanwhile (rebuilt from
    /// the history) list the same objects, each once, in key order, all or one namespace.
    #[test]
    fn pages_read_in_place_match_pages_rebuilt_from_history() {
        let names = |store: &Store, namespace: Option<&str>, write_between: bool| {
            let mut query = ListQuery {
                namespace: namespace.map(str::to_string),
                limit: Some(2),
                ..Default::default()
            };
            let mut names = Vec::new();
            loop {
                let page = store.read(|s| list(s, &Gvr::BATCH_JOB, &query)).unwrap();
                names.extend(page.items.iter().map(|o| {
                    let meta = &o["metadata"];
                    format!("{}/{}", meta["namespace"], meta["name"])
                }));
                if write_between {
                    let kind = ResourceKind::new("batch", "v1", "Job", "jobs", true);
                    let name = format!("late-{}", names.len());
                    store.write(|s| {
                        create(
                            s,
                            &kind,
                            "a",
                            json!({ "metadata": { "name": name } }),
                            CreateOptions::default(),
                        )
                        .unwrap()
                    });
                }
                query.continue_token = page.continue_token;
                if query.continue_token.is_none() {
                    return names;
                }
            }
        };
        for namespace in [None, Some("a"), Some("b")] {
            let quiet = names(&seeded(9), namespace, false);
            let busy = names(&seeded(9), namespace, true);
            assert_eq!(quiet, busy, "namespace {namespace:?}");
            let expected = if namespace.is_none() {
                9
            } else if namespace == Some("a") {
                5
            } else {
                4
            };
            assert_eq!(quiet.len(), expected, "{quiet:?}");
            let mut sorted = quiet.clone();
            sorted.sort();
            assert_eq!(quiet, sorted, "key order");
        }
    }

    #[test]
    fn selectors_and_namespace() {
        let store = seeded(6);
        let query = ListQuery {
            namespace: Some("a".into()),
            labels: LabelSelector::parse("even=true").unwrap(),
            ..Default::default()
        };
        let page = store.read(|s| list(s, &Gvr::BATCH_JOB, &query)).unwrap();
        assert_eq!(page.items.len(), 3);
        assert!(page.continue_token.is_none());
    }
}
