//! jobrelay's finalizer on job objects: adding it to watched jobs, and removing it.
//!
//! Both are JSON patches guarded by `test` operations, so they never race another writer: a
//! patch against a changed object fails instead of clobbering it, and the next observed
//! version (or the next release attempt) tries again.

use std::time::Duration;

use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{Value, json};

use super::kinds::JobKind;

/// Whether jobrelay should add its finalizer to this version: not there yet, and the job is
/// not being deleted (a finalizer must never be added to a job already being deleted).
pub fn needs_finalizer(object: &DynamicObject, finalizer: &str) -> bool {
    object.metadata.deletion_timestamp.is_none()
        && needs_finalizer_ignoring_deletion(object, finalizer)
}

/// Whether the object lacks the finalizer (deleting or not).
pub fn needs_finalizer_ignoring_deletion(object: &DynamicObject, finalizer: &str) -> bool {
    !object
        .metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|n| n == finalizer))
}

/// Whether the object's JSON carries the finalizer.
pub fn has_finalizer(object: &Value, finalizer: &str) -> bool {
    object
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| f.iter().any(|n| n.as_str() == Some(finalizer)))
}

fn api(client: Client, kind: &JobKind, namespace: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(&kind.group, &kind.version, &kind.kind);
    let ar = ApiResource::from_gvk_with_plural(&gvk, &kind.plural);
    Api::namespaced_with(client, namespace, &ar)
}

fn patch_of(ops: Value) -> Result<Patch<()>, String> {
    serde_json::from_value::<json_patch::Patch>(ops)
        .map(Patch::Json)
        .map_err(|e| format!("bad patch: {e}"))
}

/// Add the finalizer to the version observed. Fails harmlessly if the object changed since.
pub async fn add(
    client: Client,
    kind: &JobKind,
    object: &DynamicObject,
    finalizer: &str,
) -> Result<(), String> {
    let (Some(ns), Some(name), Some(rv)) = (
        object.metadata.namespace.as_deref(),
        object.metadata.name.as_deref(),
        object.metadata.resource_version.as_deref(),
    ) else {
        return Err("object without namespace, name or resourceVersion".into());
    };
    let ops = match &object.metadata.finalizers {
        Some(list) if !list.is_empty() => json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
            {"op": "add", "path": "/metadata/finalizers/-", "value": finalizer},
        ]),
        _ => json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
            {"op": "add", "path": "/metadata/finalizers", "value": [finalizer]},
        ]),
    };
    api(client, kind, ns)
        .patch(name, &PatchParams::default(), &patch_of(ops)?)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
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
) -> Result<bool, String> {
    let api = api(client, kind, namespace);
    for attempt in 0..5u64 {
        let object = match api.get_opt(name).await.map_err(|e| e.to_string())? {
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
            Err(e) if attempt < 4 => {
                tracing::debug!(job = %name, error = %e, "finalizer removal raced a change; retrying");
                tokio::time::sleep(Duration::from_millis(100 * (attempt + 1))).await;
            }
            Err(e) => return Err(e.to_string()),
        }
    }
    Err("gave up after repeated conflicts".into())
}
