//! Reading job objects one by one, so one bad object cannot blind a whole kind.
//!
//! kube's watcher decodes a whole list page, and each watch event, into the resource type: with
//! `DynamicObject`, one object the JSON decoder refuses (nested deeper than its recursion limit,
//! say) fails the whole page, every re-list fails the same way, and the kind is blind on that
//! cluster for good. [`LenientObject`] takes each object as raw JSON first — which has no depth
//! limit — and decodes it on its own: a good object is a `DynamicObject` as before; a bad one
//! keeps the metadata that could be read (namespace, name, uid, resourceVersion) and the reason,
//! so the stream can skip and report it by name and the rest of the kind keeps flowing.

use std::borrow::Cow;

use kube::Resource;
use kube::api::{ApiResource, DynamicObject};
use kube::core::{DynamicResourceScope, ObjectMeta};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

/// One job object as listed or watched: decoded, or refused with what could be read of it.
#[derive(Debug, Clone)]
pub struct LenientObject {
    pub metadata: ObjectMeta,
    pub object: Result<DynamicObject, String>,
}

/// Only the metadata of an object; everything else is skipped without being decoded.
#[derive(Deserialize)]
struct MetadataOnly {
    #[serde(default)]
    metadata: ObjectMeta,
}

impl LenientObject {
    /// Decodes one object's JSON text.
    pub fn from_json(text: &str) -> LenientObject {
        match dynamic_object(text) {
            Ok(object) => LenientObject {
                metadata: object.metadata.clone(),
                object: Ok(object),
            },
            Err(e) => LenientObject {
                metadata: serde_json::from_str::<MetadataOnly>(text)
                    .map(|m| m.metadata)
                    .unwrap_or_default(),
                object: Err(e.to_string()),
            },
        }
    }

    /// `namespace/name` (or the uid, or `?`), for reports.
    pub fn label(&self) -> String {
        label(&self.metadata)
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

/// The object as `DynamicObject` decodes it — `apiVersion` and `kind` as its types (when both
/// are there), `metadata`, everything else as `data` — built from one JSON tree. Decoding
/// `DynamicObject` directly goes through serde's buffering of its flattened fields, a second
/// copy of the whole object; here each value is read once and moved into place.
fn dynamic_object(text: &str) -> Result<DynamicObject, serde_json::Error> {
    let mut data = match serde_json::from_str::<serde_json::Value>(text)? {
        serde_json::Value::Object(map) => map,
        _ => {
            return Err(serde::de::Error::custom(
                "a job object must be a JSON object",
            ));
        }
    };
    let metadata = match data.remove("metadata") {
        Some(meta) => serde_json::from_value::<ObjectMeta>(meta)?,
        None => ObjectMeta::default(),
    };
    // As serde's own decode does: both keys are taken out, and they make the types only when
    // both are text.
    let types = match (data.remove("apiVersion"), data.remove("kind")) {
        (Some(serde_json::Value::String(api_version)), Some(serde_json::Value::String(kind))) => {
            Some(kube::core::TypeMeta { api_version, kind })
        }
        _ => None,
    };
    Ok(DynamicObject {
        types,
        metadata,
        data: serde_json::Value::Object(data),
    })
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
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(depth: usize) -> String {
        format!("{}1{}", "[".repeat(depth), "]".repeat(depth))
    }

    #[test]
    fn a_deep_object_is_refused_alone_with_its_name() {
        let bad = format!(
            r#"{{"apiVersion":"batch/v1","kind":"Job","metadata":{{"name":"deep","namespace":"ml","uid":"u1","resourceVersion":"7"}},"spec":{}}}"#,
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
        assert!(bad.object.is_err());
        assert_eq!(bad.label(), "ml/deep");
        assert_eq!(bad.metadata.uid.as_deref(), Some("u1"));
        assert_eq!(
            good.object.as_ref().map(|o| o.metadata.name.clone()),
            Ok(Some("ok".into()))
        );
    }

    /// The one-tree decode gives exactly what serde's own `DynamicObject` decode gives.
    #[test]
    fn decoding_matches_dynamic_objects_own() {
        for text in [
            r#"{"apiVersion":"batch.volcano.sh/v1alpha1","kind":"Job","metadata":{"name":"a","namespace":"ml","uid":"u","resourceVersion":"3","labels":{"x":"y"},"managedFields":[{"manager":"m"}]},"spec":{"tasks":[{"replicas":2}]},"status":{"state":{"phase":"Running"}}}"#,
            r#"{"kind":"Job","metadata":{"name":"no-api-version"},"spec":{}}"#,
            r#"{"apiVersion":"v1","kind":"Job"}"#,
        ] {
            let ours = dynamic_object(text).expect("decodes");
            let theirs: DynamicObject = serde_json::from_str(text).expect("decodes");
            assert_eq!(ours.types, theirs.types, "{text}");
            assert_eq!(ours.metadata, theirs.metadata, "{text}");
            assert_eq!(ours.data, theirs.data, "{text}");
        }
        assert!(dynamic_object("[1, 2]").is_err());
        assert!(dynamic_object(r#"{"metadata": {"name": 7}}"#).is_err());
    }

    #[test]
    fn garbage_never_panics() {
        for text in [
            "",
            "1",
            "[]",
            "{",
            r#"{"metadata":7}"#,
            r#"{"metadata":{"name":[]}}"#,
        ] {
            let object = LenientObject::from_json(text);
            assert!(object.object.is_err(), "{text}");
        }
    }
}
