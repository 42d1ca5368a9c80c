//! The apiserver's rules for writes: what create, update, patch and delete do to an object
//! beyond storing it.
//!
//! These rules are what controllers quietly depend on: system fields (`uid`,
//! `creationTimestamp`, `generation`, `resourceVersion`) are owned by the server; a stale
//! `resourceVersion` is a 409 Conflict; `generation` moves only when the desired state changes;
//! a no-op update writes nothing and emits nothing; with a status subresource the main resource
//! and `/status` each change only their half; an object with finalizers is only marked for
//! deletion, disappears when its last finalizer goes, and cannot gain new finalizers meanwhile;
//! and when an owner goes, the garbage collector removes its dependents.
//!
//! HTTP handlers and the in-process driver API both call these functions, so tests that seed
//! state in-process see exactly what a client would see over HTTP.

use std::collections::HashSet;
use std::sync::Arc;

use serde_json::{Value, json};

use super::meta::{
    finalizers, generation, is_deleting, is_dns_subdomain, meta_mut, meta_str, new_uid,
    now_rfc3339, owner_uids, random_suffix, set_meta,
};
use super::patch::PatchBody;
use super::resources::{Gvr, ResourceKind};
use super::status::SimError;
use super::store::{EventType, ObjKey, StoreInner};

/// Which half of an object a write addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    /// The main resource: everything but `.status` (when status is a subresource).
    Main,
    /// The `/status` subresource: only `.status`.
    Status,
}

/// Options of a create.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct CreateOptions {
    pub dry_run: bool,
    /// Keep `.status` from the request. The HTTP API drops it (as the apiserver does for kinds
    /// with a status subresource); the in-process API keeps it so tests can seed any state.
    pub keep_status: bool,
}

/// Options of a delete (the `DeleteOptions` body).
#[derive(Clone, Debug, Default)]
pub(crate) struct DeleteOptions {
    pub dry_run: bool,
    pub precondition_uid: Option<String>,
    pub precondition_rv: Option<String>,
    /// `propagationPolicy: Orphan`: dependents lose their owner reference instead of being
    /// deleted.
    pub orphan: bool,
    /// `propagationPolicy` as given (recorded for tests; only `Orphan` changes what happens).
    pub propagation: Option<String>,
}

/// Creates an object. `path_namespace` is the namespace from the URL ("" for cluster-scoped
/// kinds, or for in-process creates that take it from the object).
pub(crate) fn create(
    store: &mut StoreInner,
    kind: &ResourceKind,
    path_namespace: &str,
    mut obj: Value,
    opts: CreateOptions,
) -> Result<Arc<Value>, SimError> {
    if !obj.is_object() {
        return Err(SimError::bad_request(
            "the request body must be a JSON object",
        ));
    }
    check_type(kind, &mut obj)?;
    let namespace = resolve_namespace(kind, path_namespace, &mut obj)?;

    if !meta_str(&obj, "resourceVersion").is_empty() {
        return Err(SimError::bad_request(
            "resourceVersion should not be set on objects to be created",
        ));
    }
    let mut name = meta_str(&obj, "name").to_string();
    if name.is_empty() {
        let prefix = meta_str(&obj, "generateName");
        if prefix.is_empty() {
            return Err(SimError::invalid(
                &kind.gvr,
                &kind.kind,
                "",
                "metadata.name",
                "FieldValueRequired",
                "Required value: name or generateName is required",
            ));
        }
        name = format!("{prefix}{}", random_suffix());
        set_meta(&mut obj, "name", Some(json!(name)));
    }
    if !is_dns_subdomain(&name) {
        return Err(SimError::invalid(
            &kind.gvr,
            &kind.kind,
            &name,
            "metadata.name",
            "FieldValueInvalid",
            &format!(
                "Invalid value: \"{name}\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
            ),
        ));
    }
    let key = ObjKey::new(&kind.gvr, &namespace, &name);
    if store.objects.contains_key(&key) {
        return Err(SimError::already_exists(&kind.gvr, &name));
    }

    if kind.status_subresource
        && !opts.keep_status
        && let Some(map) = obj.as_object_mut()
    {
        map.remove("status");
    }
    let meta = meta_mut(&mut obj);
    for field in [
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "managedFields",
        "selfLink",
    ] {
        meta.remove(field);
    }
    meta.insert("uid".into(), json!(new_uid()));
    meta.insert("creationTimestamp".into(), json!(now_rfc3339()));
    meta.insert("generation".into(), json!(1));

    if opts.dry_run {
        return Ok(Arc::new(obj));
    }
    Ok(store.commit_put(key, obj, EventType::Added))
}

/// Replaces an object (PUT), or its status (PUT `/status`).
pub(crate) fn update(
    store: &mut StoreInner,
    kind: &ResourceKind,
    namespace: &str,
    name: &str,
    mut new: Value,
    target: Target,
    dry_run: bool,
) -> Result<Arc<Value>, SimError> {
    let gvr = &kind.gvr;
    let key = ObjKey::new(gvr, namespace, name);
    let existing = store
        .objects
        .get(&key)
        .cloned()
        .ok_or_else(|| SimError::not_found(gvr, name))?;
    if !new.is_object() {
        return Err(SimError::bad_request(
            "the request body must be a JSON object",
        ));
    }
    check_type(kind, &mut new)?;
    let body_namespace = resolve_namespace(kind, namespace, &mut new)?;
    if body_namespace != namespace {
        return Err(SimError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    let body_name = meta_str(&new, "name");
    if body_name != name {
        return Err(SimError::bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    let want_rv = meta_str(&new, "resourceVersion");
    if !want_rv.is_empty() && want_rv != meta_str(&existing, "resourceVersion") {
        return Err(SimError::stale(gvr, name));
    }
    let want_uid = meta_str(&new, "uid");
    let have_uid = meta_str(&existing, "uid");
    if !want_uid.is_empty() && want_uid != have_uid {
        return Err(SimError::conflict(
            gvr,
            name,
            &format!(
                "Precondition failed: UID in precondition: {want_uid}, UID in object meta: {have_uid}"
            ),
        ));
    }

    let mut candidate = match target {
        Target::Main => {
            let mut c = new;
            let meta = meta_mut(&mut c);
            for field in [
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
                "resourceVersion",
            ] {
                match existing.pointer(&format!("/metadata/{field}")) {
                    Some(v) => meta.insert(field.to_string(), v.clone()),
                    None => meta.remove(field),
                };
            }
            meta.remove("managedFields");
            meta.remove("selfLink");
            if kind.status_subresource {
                copy_field(&existing, &mut c, "status");
            }
            c
        }
        Target::Status => {
            let mut c = (*existing).clone();
            copy_field(&new, &mut c, "status");
            c
        }
    };

    if is_deleting(&existing) {
        let before: HashSet<String> = finalizers(&existing).into_iter().collect();
        let added: Vec<String> = finalizers(&candidate)
            .into_iter()
            .filter(|f| !before.contains(f))
            .collect();
        if !added.is_empty() {
            return Err(SimError::invalid(
                gvr,
                &kind.kind,
                name,
                "metadata.finalizers",
                "FieldValueForbidden",
                &format!(
                    "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers {added:?}"
                ),
            ));
        }
    }

    if desired_state(&existing) != desired_state(&candidate) {
        set_meta(
            &mut candidate,
            "generation",
            Some(json!(generation(&existing) + 1)),
        );
    }
    if candidate == *existing {
        // A no-op write: the apiserver neither bumps the RV nor notifies watchers.
        return Ok(existing);
    }
    if dry_run {
        return Ok(Arc::new(candidate));
    }
    if is_deleting(&candidate) && finalizers(&candidate).is_empty() {
        return Ok(remove_and_collect(store, key, candidate, false));
    }
    Ok(store.commit_put(key, candidate, EventType::Modified))
}

/// Applies a patch to the current object and stores the result as an update would. A patched
/// `metadata.resourceVersion` that differs from the current one is a 409, as on the apiserver.
/// With `create_missing` (server-side apply), a missing object is created from the patch.
#[expect(
    clippy::too_many_arguments,
    reason = "the parts of one PATCH request, as both callers (the HTTP router and the kit's \
              own patches) hold them apart"
)]
pub(crate) fn patch(
    store: &mut StoreInner,
    kind: &ResourceKind,
    namespace: &str,
    name: &str,
    patch: &PatchBody,
    target: Target,
    create_missing: bool,
    dry_run: bool,
) -> Result<(Arc<Value>, bool), SimError> {
    let key = ObjKey::new(&kind.gvr, namespace, name);
    let Some(existing) = store.objects.get(&key).cloned() else {
        if create_missing && target == Target::Main {
            let base = json!({ "metadata": { "name": name } });
            let mut obj = patch.apply_to(&base)?;
            if meta_str(&obj, "name") != name {
                return Err(SimError::bad_request(
                    "the name in the patch does not match the URL",
                ));
            }
            set_meta(&mut obj, "resourceVersion", None);
            let opts = CreateOptions {
                dry_run,
                keep_status: false,
            };
            return create(store, kind, namespace, obj, opts).map(|o| (o, true));
        }
        return Err(SimError::not_found(&kind.gvr, name));
    };
    let patched = patch.apply_to(&existing)?;
    update(store, kind, namespace, name, patched, target, dry_run).map(|o| (o, false))
}

/// Deletes an object: marks it when it has finalizers, removes it otherwise.
pub(crate) fn delete(
    store: &mut StoreInner,
    gvr: &Gvr,
    namespace: &str,
    name: &str,
    opts: &DeleteOptions,
) -> Result<Arc<Value>, SimError> {
    let key = ObjKey::new(gvr, namespace, name);
    let existing = store
        .objects
        .get(&key)
        .cloned()
        .ok_or_else(|| SimError::not_found(gvr, name))?;
    let uid = meta_str(&existing, "uid").to_string();
    if let Some(want) = opts.precondition_uid.as_deref().filter(|u| !u.is_empty())
        && want != uid
    {
        return Err(SimError::conflict(
            gvr,
            name,
            &format!("Precondition failed: UID in precondition: {want}, UID in object meta: {uid}"),
        ));
    }
    let have_rv = meta_str(&existing, "resourceVersion");
    if let Some(want) = opts.precondition_rv.as_deref().filter(|r| !r.is_empty())
        && want != have_rv
    {
        return Err(SimError::conflict(
            gvr,
            name,
            &format!(
                "Precondition failed: ResourceVersion in precondition: {want}, ResourceVersion in meta: {have_rv}"
            ),
        ));
    }

    if finalizers(&existing).is_empty() {
        if opts.dry_run {
            return Ok(existing);
        }
        return Ok(remove_and_collect(
            store,
            key,
            (*existing).clone(),
            opts.orphan,
        ));
    }
    if opts.dry_run || is_deleting(&existing) {
        // Already marked: a repeated delete changes nothing.
        return Ok(existing);
    }
    if opts.orphan {
        store.orphan_uids.insert(uid);
    }
    Ok(mark_deleting(store, key, &existing))
}

fn mark_deleting(store: &mut StoreInner, key: ObjKey, existing: &Value) -> Arc<Value> {
    let mut marked = existing.clone();
    let next_generation = generation(existing) + 1;
    let meta = meta_mut(&mut marked);
    meta.insert("deletionTimestamp".into(), json!(now_rfc3339()));
    meta.insert("deletionGracePeriodSeconds".into(), json!(0));
    if next_generation > 1 {
        meta.insert("generation".into(), json!(next_generation));
    }
    store.commit_put(key, marked, EventType::Modified)
}

/// Removes an object for good, then lets the garbage collector deal with its dependents.
fn remove_and_collect(
    store: &mut StoreInner,
    key: ObjKey,
    last_state: Value,
    orphan: bool,
) -> Arc<Value> {
    let uid = meta_str(&last_state, "uid").to_string();
    let removed = store.commit_remove(key, last_state);
    let orphan = store.orphan_uids.remove(&uid) || orphan;
    if store.garbage_collection && !uid.is_empty() {
        collect_dependents(store, uid, orphan);
    }
    removed
}

/// The garbage collector, run synchronously: dependents whose owners are all gone are deleted
/// (marked, if they have finalizers); with `orphan` they just lose the owner reference.
fn collect_dependents(store: &mut StoreInner, owner_uid: String, orphan: bool) {
    let mut gone = vec![owner_uid];
    let mut first = true;
    while let Some(owner) = gone.pop() {
        let live: HashSet<String> = store
            .objects
            .values()
            .map(|o| meta_str(o, "uid").to_string())
            .collect();
        let dependents: Vec<(ObjKey, Arc<Value>)> = store
            .objects
            .iter()
            .filter(|(_, o)| owner_uids(o).contains(&owner))
            .map(|(k, o)| (k.clone(), o.clone()))
            .collect();
        for (key, dependent) in dependents {
            let other_owner_alive = owner_uids(&dependent)
                .iter()
                .any(|u| u != &owner && live.contains(u));
            if (first && orphan) || other_owner_alive {
                let mut kept = (*dependent).clone();
                drop_owner_ref(&mut kept, &owner);
                store.commit_put(key, kept, EventType::Modified);
            } else if finalizers(&dependent).is_empty() {
                let uid = meta_str(&dependent, "uid").to_string();
                store.commit_remove(key, (*dependent).clone());
                gone.push(uid);
            } else if !is_deleting(&dependent) {
                mark_deleting(store, key, &dependent);
            }
        }
        first = false;
    }
}

fn drop_owner_ref(obj: &mut Value, owner_uid: &str) {
    if let Some(refs) = obj
        .pointer_mut("/metadata/ownerReferences")
        .and_then(Value::as_array_mut)
    {
        refs.retain(|r| r.get("uid").and_then(Value::as_str) != Some(owner_uid));
    }
}

/// Fills `kind`/`apiVersion`, rejecting a body that names another type.
fn check_type(kind: &ResourceKind, obj: &mut Value) -> Result<(), SimError> {
    let want_version = kind.api_version();
    let map = obj
        .as_object_mut()
        .ok_or_else(|| SimError::bad_request("the request body must be a JSON object"))?;
    match map.get("apiVersion").and_then(Value::as_str) {
        Some(v) if !v.is_empty() && v != want_version => {
            return Err(SimError::bad_request(format!(
                "the API version in the data ({v}) does not match the expected API version ({want_version})"
            )));
        }
        _ => {}
    }
    match map.get("kind").and_then(Value::as_str) {
        Some(k) if !k.is_empty() && k != kind.kind => {
            return Err(SimError::bad_request(format!(
                "the kind in the data ({k}) does not match the expected kind ({})",
                kind.kind
            )));
        }
        _ => {}
    }
    map.insert("apiVersion".into(), json!(want_version));
    map.insert("kind".into(), json!(kind.kind));
    Ok(())
}

/// Decides the object's namespace from the path and the body, and writes it into the body.
fn resolve_namespace(
    kind: &ResourceKind,
    path_namespace: &str,
    obj: &mut Value,
) -> Result<String, SimError> {
    if !kind.namespaced {
        set_meta(obj, "namespace", None);
        return Ok(String::new());
    }
    let body_namespace = meta_str(obj, "namespace").to_string();
    let namespace = match (path_namespace.is_empty(), body_namespace.is_empty()) {
        (false, false) if path_namespace != body_namespace => {
            return Err(SimError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        (false, _) => path_namespace.to_string(),
        (true, false) => body_namespace,
        (true, true) => "default".to_string(),
    };
    set_meta(obj, "namespace", Some(json!(namespace)));
    Ok(namespace)
}

/// Replaces `to[field]` with `from[field]` (or removes it when `from` has none).
fn copy_field(from: &Value, to: &mut Value, field: &str) {
    if let Some(map) = to.as_object_mut() {
        match from.get(field) {
            Some(v) => map.insert(field.to_string(), v.clone()),
            None => map.remove(field),
        };
    }
}

/// Everything that counts as desired state for `generation`: all top-level fields except the
/// type, metadata and status.
fn desired_state(obj: &Value) -> Vec<(&String, &Value)> {
    obj.as_object()
        .map(|m| {
            m.iter()
                .filter(|(k, _)| {
                    !matches!(k.as_str(), "apiVersion" | "kind" | "metadata" | "status")
                })
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::store::Store;

    fn job_kind() -> ResourceKind {
        ResourceKind::new("batch", "v1", "Job", "jobs", true)
    }

    fn job(name: &str) -> Value {
        json!({ "metadata": { "name": name }, "spec": { "parallelism": 1 } })
    }

    #[test]
    fn create_sets_system_fields_and_rejects_duplicates() {
        let store = Store::new(100, true);
        let kind = job_kind();
        store.write(|s| {
            let o = create(s, &kind, "ns", job("a"), CreateOptions::default()).unwrap();
            assert_eq!(o["kind"], "Job");
            assert_eq!(o["apiVersion"], "batch/v1");
            assert_eq!(o["metadata"]["namespace"], "ns");
            assert_eq!(o["metadata"]["generation"], 1);
            assert_eq!(meta_str(&o, "uid").len(), 36);
            let err = create(s, &kind, "ns", job("a"), CreateOptions::default()).unwrap_err();
            assert_eq!((err.code, err.reason.as_str()), (409, "AlreadyExists"));
            let err =
                create(s, &kind, "ns", job("Bad_Name"), CreateOptions::default()).unwrap_err();
            assert_eq!(err.code, 422);
            let gen_name = json!({ "metadata": { "generateName": "x-" } });
            let o = create(s, &kind, "ns", gen_name, CreateOptions::default()).unwrap();
            assert!(meta_str(&o, "name").starts_with("x-"));
        });
    }

    #[test]
    fn update_rules() {
        let store = Store::new(100, true);
        let kind = job_kind();
        store.write(|s| {
            let o = create(s, &kind, "ns", job("a"), CreateOptions::default()).unwrap();
            let rv0 = s.rv;
            // No-op: same content.
            let same = update(s, &kind, "ns", "a", (*o).clone(), Target::Main, false).unwrap();
            assert_eq!(s.rv, rv0);
            assert_eq!(same, o);
            // Status through the main resource is ignored; metadata change does not bump generation.
            let mut c = (*o).clone();
            c["status"] = json!({ "active": 1 });
            c["metadata"]["labels"] = json!({ "a": "b" });
            let u = update(s, &kind, "ns", "a", c, Target::Main, false).unwrap();
            assert!(u.get("status").is_none());
            assert_eq!(u["metadata"]["generation"], 1);
            // Stale RV conflicts.
            let mut stale = (*o).clone();
            stale["spec"]["parallelism"] = json!(2);
            let err = update(s, &kind, "ns", "a", stale, Target::Main, false).unwrap_err();
            assert_eq!(err.code, 409);
            // Spec change bumps generation.
            let mut fresh = (*u).clone();
            fresh["spec"]["parallelism"] = json!(2);
            let u2 = update(s, &kind, "ns", "a", fresh, Target::Main, false).unwrap();
            assert_eq!(u2["metadata"]["generation"], 2);
            // Status subresource changes only status.
            let mut st = (*u2).clone();
            st["status"] = json!({ "active": 1 });
            st["spec"]["parallelism"] = json!(9);
            let u3 = update(s, &kind, "ns", "a", st, Target::Status, false).unwrap();
            assert_eq!(u3["status"]["active"], 1);
            assert_eq!(u3["spec"]["parallelism"], 2);
        });
    }

    #[test]
    fn finalizers_and_garbage_collection() {
        let store = Store::new(100, true);
        let kind = job_kind();
        let pod_kind = ResourceKind::new("", "v1", "Pod", "pods", true);
        store.write(|s| {
            let mut j = job("a");
            j["metadata"]["finalizers"] = json!(["x"]);
            let j = create(s, &kind, "ns", j, CreateOptions::default()).unwrap();
            let pod = json!({ "metadata": { "name": "p", "ownerReferences": [
                { "apiVersion": "batch/v1", "kind": "Job", "name": "a", "uid": meta_str(&j, "uid") }
            ] } });
            create(s, &pod_kind, "ns", pod, CreateOptions::default()).unwrap();

            let marked = delete(s, &Gvr::BATCH_JOB, "ns", "a", &DeleteOptions::default()).unwrap();
            assert!(is_deleting(&marked));
            assert_eq!(marked["metadata"]["deletionGracePeriodSeconds"], 0);
            // Adding a finalizer now is refused.
            let mut more = (*marked).clone();
            more["metadata"]["finalizers"] = json!(["x", "y"]);
            let err = update(s, &kind, "ns", "a", more, Target::Main, false).unwrap_err();
            assert_eq!(err.code, 422);
            // Removing the last finalizer removes the object and collects the pod.
            let mut done = (*marked).clone();
            done["metadata"]["finalizers"] = json!([]);
            update(s, &kind, "ns", "a", done, Target::Main, false).unwrap();
            assert!(s.objects.is_empty());
        });
    }
}
