//! Reading job objects one by one, so one bad object cannot blind a whole kind.
//!
//! kube's watcher decodes a whole list page, and each watch event, into the resource type: with
//! `DynamicObject`, one object the JSON decoder refuses (nested deeper than its recursion limit,
//! say) fails the whole page, every re-list fails the same way, and the kind is blind on that
//! cluster for good. [`LenientObject`] takes each object as raw JSON first — which has no depth
//! limit — and reads it on its own ([`JobObject`]); a bad one keeps the metadata that could be
//! read (namespace, name, uid, resourceVersion), the reason and, when its metadata was read,
//! its text, so the stream can report it by name and still deliver it, its status unreadable
//! ([`JobObject::status_unreadable`]), or skip it when not even its uid and version are known;
//! the rest of the kind keeps flowing.

use std::borrow::Cow;

use kube::Resource;
use kube::api::ApiResource;
use kube::core::{DynamicResourceScope, ObjectMeta};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use super::object::JobObject;

/// One job object as listed or watched: read, or refused with what could be read of it.
#[derive(Debug, Clone)]
pub struct LenientObject(pub Result<JobObject, Unreadable>);

/// An object that could not be read.
#[derive(Debug, Clone)]
pub struct Unreadable {
    /// What could be read of its metadata (nothing, at worst).
    pub metadata: ObjectMeta,
    /// Why it could not be read: the JSON decoder's error, with where in the text it stopped.
    pub reason: String,
    /// Its text as it came, for an object whose metadata was read: it is delivered as a version
    /// with an unreadable status ([`JobObject::status_unreadable`]).
    pub text: Option<std::sync::Arc<str>>,
}

/// Only the metadata of an object; everything else is skipped without being decoded.
#[derive(Deserialize)]
struct MetadataOnly {
    #[serde(default)]
    metadata: ObjectMeta,
}

impl LenientObject {
    /// Reads one object's JSON text.
    pub fn from_json(text: &str) -> LenientObject {
        LenientObject(JobObject::from_json(text).map_err(|e| {
            let metadata = serde_json::from_str::<MetadataOnly>(text).map(|m| m.metadata);
            Unreadable {
                text: metadata.is_ok().then(|| std::sync::Arc::from(text)),
                metadata: metadata.unwrap_or_default(),
                reason: e.to_string(),
            }
        }))
    }

    /// `namespace/name` (or the uid, or `?`), for reports.
    pub fn label(&self) -> String {
        label(self.meta())
    }
}

/// `namespace/name` of an object (or its uid, or `?`), for reports.
pub fn label(metadata: &ObjectMeta) -> String {
    match (&metadata.namespace, &metadata.name, &metadata.uid) {
        (Some(ns), Some(name), _) => format!("{ns}/{name}"),
        (None, Some(name), _) => name.clone(),
        (_, None, Some(uid)) => format!("uid {uid}"),
        _ => "?".into(),
    }
}

impl<'de> Deserialize<'de> for LenientObject {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = Box::<RawValue>::deserialize(deserializer)?;
        Ok(LenientObject::from_json(raw.get()))
    }
}

impl Resource for LenientObject {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn group(dt: &ApiResource) -> Cow<'_, str> {
        dt.group.as_str().into()
    }

    fn version(dt: &ApiResource) -> Cow<'_, str> {
        dt.version.as_str().into()
    }

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }

    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }

    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }

    fn meta(&self) -> &ObjectMeta {
        match &self.0 {
            Ok(object) => &object.metadata,
            Err(unreadable) => &unreadable.metadata,
        }
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        match &mut self.0 {
            Ok(object) => &mut object.metadata,
            Err(unreadable) => &mut unreadable.metadata,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(depth: usize) -> String {
        format!("{}1{}", "[".repeat(depth), "]".repeat(depth))
    }

    /// A status nested deeper than the JSON decoder's recursion limit: the status is decoded
    /// (normalizers read it), so the object is refused, alone.
    #[test]
    fn a_deep_object_is_refused_alone_with_its_name() {
        let bad = format!(
            r#"{{"apiVersion":"batch/v1","kind":"Job","metadata":{{"name":"deep","namespace":"ml","uid":"u1","resourceVersion":"7"}},"status":{{"x":{}}}}}"#,
            nested(10_000)
        );
        let good = r#"{"apiVersion":"batch/v1","kind":"Job","metadata":{"name":"ok","namespace":"ml","uid":"u2","resourceVersion":"8"}}"#;
        let list = format!(r#"{{"items":[{bad},{good}]}}"#);
        #[derive(Deserialize)]
        struct List {
            items: Vec<LenientObject>,
        }
        let list: List = serde_json::from_str(&list).expect("the page decodes");
        assert_eq!(list.items.len(), 2);
        let (bad, good) = (&list.items[0], &list.items[1]);
        assert!(bad.0.is_err());
        assert_eq!(bad.label(), "ml/deep");
        assert_eq!(bad.meta().uid.as_deref(), Some("u1"));
        assert_eq!(
            good.0.as_ref().map(|o| o.metadata.name.clone()).ok(),
            Some(Some("ok".into()))
        );
        assert_eq!(good.meta().resource_version.as_deref(), Some("8"));
    }

    /// The spec is never decoded, so its depth does not matter: the object is read, and its
    /// text passed on whole.
    #[test]
    fn a_deep_spec_is_read() {
        let text = format!(
            r#"{{"apiVersion":"batch/v1","kind":"Job","metadata":{{"name":"deep","uid":"u1","resourceVersion":"7"}},"spec":{}}}"#,
            nested(10_000)
        );
        let object = LenientObject::from_json(&text);
        let read = object.0.expect("read");
        assert_eq!(read.text(), text);
    }
}
