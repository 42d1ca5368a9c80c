//! jobrelay's finalizer on job objects: adding it to watched jobs, and removing it.
//!
//! Both are JSON patches guarded by `test` operations, so neither clobbers another writer:
//! adding tests the resourceVersion it was made for, and fails if the object changed since;
//! removing tests the uid and the finalizer's place in the list. Adding is retried on a timer
//! of its own ([`keep_adding`]) until the finalizer is on, or the job is gone or being
//! deleted: a job must not go unprotected because the few versions it had all met an API
//! error.
//!
//! [`spec`] is the main file's `finalizers:` section: the finalizer's name these patches
//! write, and how long and by what a deletion is held.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::core::ObjectMeta;
use kube::{Api, Client};
use serde_json::{Value, json};

use super::kinds::JobKind;

pub mod spec;

/// Whether jobrelay should add its finalizer to this version: not there yet, and the job is
/// not being deleted (a finalizer must never be added to a job already being deleted).
pub fn needs_finalizer(metadata: &ObjectMeta, finalizer: &str) -> bool {
    metadata.deletion_timestamp.is_none() && needs_finalizer_ignoring_deletion(metadata, finalizer)
}

/// Whether the object lacks the finalizer (deleting or not).
pub fn needs_finalizer_ignoring_deletion(metadata: &ObjectMeta, finalizer: &str) -> bool {
    !metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|n| n == finalizer))
}

/// Whether the object's JSON text carries the finalizer. Only `metadata.finalizers` is
/// decoded, so an object whose spec is too deep to decode as a tree is still judged (the
/// watcher passes such objects on: it never decodes the spec either).
pub fn has_finalizer(object_json: &str, finalizer: &str) -> bool {
    #[derive(serde::Deserialize)]
    struct Object {
        metadata: Option<Metadata>,
    }
    #[derive(serde::Deserialize)]
    struct Metadata {
        finalizers: Option<Vec<Value>>,
    }
    serde_json::from_str::<Object>(object_json).is_ok_and(|o| {
        o.metadata
            .and_then(|m| m.finalizers)
            .is_some_and(|f| f.iter().any(|n| n.as_str() == Some(finalizer)))
    })
}

fn api(client: Client, kind: &JobKind, namespace: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client, namespace, &kind.api_resource())
}

fn patch_of(ops: Value) -> Result<Patch<()>, serde_json::Error> {
    serde_json::from_value::<json_patch::Patch>(ops).map(Patch::Json)
}

/// Why removing the finalizer did not work.
#[derive(Debug, thiserror::Error)]
pub enum RemoveError {
    /// The API server refused or could not be reached.
    #[error("{0}")]
    Api(#[from] kube::Error),
    /// The JSON patch could not be built (a bug, not a cluster's answer).
    #[error("bad patch: {0}")]
    Patch(#[from] serde_json::Error),
    /// Other writers changed the job between every read and patch.
    #[error("gave up after {0} conflicting changes")]
    Conflicts(u64),
}

/// Why adding the finalizer did not work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddError {
    /// The object changed since the version the patch was made for (the `test` failed): read
    /// it again and retry. Normal on a busy job, not a failure.
    #[error("the job changed meanwhile")]
    Changed,
    /// The API server refused or could not be reached.
    #[error("{0}")]
    Failed(String),
}

/// Add the finalizer to the version observed. Fails with [`AddError::Changed`] if the object
/// changed since.
pub async fn add(
    client: Client,
    kind: &JobKind,
    metadata: &ObjectMeta,
    finalizer: &str,
) -> Result<(), AddError> {
    let (Some(ns), Some(name), Some(rv)) = (
        metadata.namespace.as_deref(),
        metadata.name.as_deref(),
        metadata.resource_version.as_deref(),
    ) else {
        return Err(AddError::Failed(
            "object without namespace, name or resourceVersion".into(),
        ));
    };
    let ops = match &metadata.finalizers {
        Some(list) if !list.is_empty() => json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
            {"op": "add", "path": "/metadata/finalizers/-", "value": finalizer},
        ]),
        _ => json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
            {"op": "add", "path": "/metadata/finalizers", "value": [finalizer]},
        ]),
    };
    let patch = patch_of(ops).map_err(|e| AddError::Failed(format!("bad patch: {e}")))?;
    match api(client, kind, ns)
        .patch(name, &PatchParams::default(), &patch)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 || status.code == 422 => {
            Err(AddError::Changed)
        }
        Err(e) => Err(AddError::Failed(e.to_string())),
    }
}

/// First and longest wait between attempts to add the finalizer.
const ADD_RETRY_MIN: Duration = Duration::from_millis(500);
const ADD_RETRY_MAX: Duration = Duration::from_secs(30);
/// Attempts made at once, each on a fresh read, while the job keeps changing under them.
const QUICK_RETRIES: u32 = 5;

/// Adds the finalizer to the job whose version `metadata` describes, retrying with backoff
/// until it is on, or the job is gone, replaced (another uid) or being deleted. After each
/// failed attempt the job is read again; the next attempt follows at once if the job had
/// merely changed (up to a few times in a row), else after the next delay. Failures other
/// than a changed object are passed to `failed` (for logs and the cluster's health). Runs
/// until done: the caller bounds it by dropping the task (the stream stopped).
pub async fn keep_adding(
    client: Client,
    kind: &JobKind,
    mut metadata: ObjectMeta,
    finalizer: &str,
    failed: impl Fn(AddError),
) {
    let (Some(ns), Some(name), Some(uid)) = (
        metadata.namespace.clone(),
        metadata.name.clone(),
        metadata.uid.clone(),
    ) else {
        return;
    };
    let api = api(client.clone(), kind, &ns);
    let mut delays = ExponentialBuilder::default()
        .with_min_delay(ADD_RETRY_MIN)
        .with_max_delay(ADD_RETRY_MAX)
        .with_jitter()
        .without_max_times()
        .build();
    let mut changed_in_a_row = 0u32;
    loop {
        match add(client.clone(), kind, &metadata, finalizer).await {
            Ok(()) => return,
            // A busy job changed under the patch: read it again and retry at once, a few
            // times, so the finalizer lands early in the job's life; past that, space the
            // attempts out, since a server that keeps answering 409 or 422 must not be
            // hammered.
            Err(AddError::Changed) if changed_in_a_row < QUICK_RETRIES => changed_in_a_row += 1,
            Err(AddError::Changed) => {
                changed_in_a_row = 0;
                tokio::time::sleep(delays.next().unwrap_or(ADD_RETRY_MAX)).await;
            }
            Err(e) => {
                changed_in_a_row = 0;
                failed(e);
                tokio::time::sleep(delays.next().unwrap_or(ADD_RETRY_MAX)).await;
            }
        }
        // Read the job again: the patch must be made against its current version.
        loop {
            match api.get_opt(&name).await {
                Ok(Some(current))
                    if current.metadata.uid.as_deref() == Some(uid.as_str())
                        && needs_finalizer(&current.metadata, finalizer) =>
                {
                    metadata = current.metadata;
                    break;
                }
                Ok(_) => return, // gone, replaced, being deleted, or already holding it
                Err(e) => {
                    failed(AddError::Failed(e.to_string()));
                    tokio::time::sleep(delays.next().unwrap_or(ADD_RETRY_MAX)).await;
                }
            }
        }
    }
}

/// Remove the finalizer from the job with this uid, if it is still there. Retries a few times
/// when another writer changes the object in between.
pub async fn remove(
    client: Client,
    kind: &JobKind,
    namespace: &str,
    name: &str,
    uid: &str,
    finalizer: &str,
) -> Result<bool, RemoveError> {
    const ATTEMPTS: u64 = 5;
    let api = api(client, kind, namespace);
    for attempt in 0..ATTEMPTS {
        let object = match api.get_opt(name).await? {
            Some(o) if o.metadata.uid.as_deref() == Some(uid) => o,
            _ => return Ok(false), // gone, or another job under the same name
        };
        let Some(index) = object
            .metadata
            .finalizers
            .as_ref()
            .and_then(|f| f.iter().position(|n| n == finalizer))
        else {
            return Ok(false);
        };
        let path = format!("/metadata/finalizers/{index}");
        let ops = json!([
            {"op": "test", "path": "/metadata/uid", "value": uid},
            {"op": "test", "path": path, "value": finalizer},
            {"op": "remove", "path": path},
        ]);
        match api
            .patch(name, &PatchParams::default(), &patch_of(ops)?)
            .await
        {
            Ok(_) => return Ok(true),
            Err(e) if attempt + 1 < ATTEMPTS => {
                tracing::debug!(job = %name, error = %e, "finalizer removal raced a change; retrying");
                tokio::time::sleep(Duration::from_millis(100 * (attempt + 1))).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(RemoveError::Conflicts(ATTEMPTS))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Read from the text alone, so a job whose spec is too deep to decode as a tree (which the
    /// watcher passes on) is still found holding the finalizer, and its deletion still held.
    #[test]
    fn the_finalizer_is_found_whatever_the_spec() {
        let deep = format!("{}1{}", "[".repeat(1_000), "]".repeat(1_000));
        let with = format!(
            r#"{{"metadata":{{"name":"a","finalizers":["other",7,"jobrelay.io/delivery"]}},"spec":{deep}}}"#
        );
        assert!(
            serde_json::from_str::<Value>(&with).is_err(),
            "too deep for a tree"
        );
        assert!(has_finalizer(&with, "jobrelay.io/delivery"));
        assert!(!has_finalizer(&with, "jobrelay.io/other"));
        let without = format!(r#"{{"metadata":{{"name":"a"}},"spec":{deep}}}"#);
        assert!(!has_finalizer(&without, "jobrelay.io/delivery"));
        assert!(!has_finalizer("not json", "jobrelay.io/delivery"));
    }
}
