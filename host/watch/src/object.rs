//! One job object as the event path reads it: its metadata, the part of it that status
//! normalizers read, and its JSON text as plugins get it.
//!
//! Why not a `DynamicObject`: an event needs the object's text (`object-json`), a few metadata
//! fields and the status. Decoding the whole object into a JSON tree, and writing the tree out
//! again as text, was a third of the daemon's CPU per event (`docs/BENCHMARKS.md`). Here the
//! text the API server sent is kept as it came, except for `metadata.managedFields` (server-side
//! apply's bookkeeping, which only makes events larger), cut out by its position in the text;
//! the spec is skipped without being decoded; the metadata is decoded straight from its text,
//! and only the status becomes a tree (the whole object does only for a kind whose field rule
//! reads outside the status: [`JobObject::decode_whole`]).
//!
//! What that quick reading does not take — a key written twice, a key written with escapes, an
//! object without `metadata`, `apiVersion` or `kind` as text — is read the whole-tree way, which
//! accepts everything a JSON object is. The two readings give the same object (tested against
//! each other), except that the whole-tree one writes the text anew, and that the quick one
//! takes an object whose `managedFields` is malformed (it is left out either way) where the
//! whole-tree one refuses it.

use std::borrow::Cow;
use std::ops::Range;
use std::sync::Arc;

use kube::core::ObjectMeta;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// One version of a job object, read.
#[derive(Debug, Clone, PartialEq)]
pub struct JobObject {
    /// The metadata, without `managedFields`.
    pub metadata: ObjectMeta,
    /// What normalizers read (see [`JobObject::view`]).
    view: Value,
    /// The object's JSON text, without `metadata.managedFields`; shared as the event's
    /// `object_json` without another copy.
    text: Arc<str>,
    /// Whether the text carries `apiVersion` and `kind` as strings.
    typed: bool,
    /// Why the status could not be read, for an object delivered with its metadata and text
    /// only ([`JobObject::status_unreadable`]).
    unreadable: Option<String>,
}

impl JobObject {
    /// Reads one object's JSON text.
    pub fn from_json(text: &str) -> Result<JobObject, serde_json::Error> {
        match quick(text) {
            Some(object) => Ok(object),
            None => whole(text),
        }
    }

    /// An object known only by its metadata (a deletion whose object could not be read).
    pub fn from_metadata(mut metadata: ObjectMeta) -> JobObject {
        metadata.managed_fields = None;
        let mut map = Map::new();
        if let Ok(meta) = serde_json::to_value(&metadata) {
            map.insert("metadata".into(), meta);
        }
        JobObject {
            view: view_of(&map),
            text: Arc::from(Value::Object(map).to_string()),
            metadata,
            typed: false,
            unreadable: None,
        }
    }

    /// An object whose metadata was read but whose status was not (nested deeper than the
    /// JSON decoder goes): it is still a version of a job, delivered with phase `unknown` and
    /// its text as the API server sent it, rather than dropped. `reason` says why.
    pub fn status_unreadable(
        mut metadata: ObjectMeta,
        text: Arc<str>,
        reason: String,
    ) -> JobObject {
        metadata.managed_fields = None;
        let view = status_view(None, deletion_timestamp(&metadata).ok().flatten(), None);
        JobObject {
            metadata,
            view,
            text,
            // Sent as it came: nothing is added to a text that cannot be decoded.
            typed: true,
            unreadable: Some(reason),
        }
    }

    /// Why the status could not be read, for an object made by
    /// [`JobObject::status_unreadable`].
    pub fn unreadable(&self) -> Option<&str> {
        self.unreadable.as_deref()
    }

    /// What normalizers read of the object: its `status` as read, `spec.suspend`, and
    /// `metadata.deletionTimestamp` as the metadata type writes it back
    /// (`{"metadata": {"deletionTimestamp": …}, "spec": {"suspend": …}, "status": …}`,
    /// each part present when the object has it) — everything a built-in normalizer, a
    /// conditions rule or a field rule on `/status` reads; after
    /// [`JobObject::decode_whole`], the whole object.
    pub fn view(&self) -> &Value {
        &self.view
    }

    /// Makes the view the whole object, for a normalizer that reads outside the status (a
    /// field rule pointing elsewhere). Fails, leaving the view as it was, when the text cannot
    /// be decoded as a tree (nested deeper than the decoder's limit): such an object cannot
    /// be normalized by that rule, and is reported as unreadable.
    pub fn decode_whole(&mut self) -> Result<(), serde_json::Error> {
        self.view = self.whole()?;
        Ok(())
    }

    /// The whole object as a JSON tree, decoded from its text.
    pub fn whole(&self) -> Result<Value, serde_json::Error> {
        serde_json::from_str(&self.text)
    }

    /// The object's JSON text, without `metadata.managedFields`.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Whether the text carries `apiVersion` and `kind` as strings; when not, it carries
    /// neither (a reader adds its own).
    pub fn typed(&self) -> bool {
        self.typed
    }

    /// The text, handing it over.
    pub fn into_text(self) -> Arc<str> {
        self.text
    }
}

/// The top-level members the quick reading needs; every other member (the spec) is skipped
/// unread. A member written twice fails the reading, as it should: the whole-tree reading
/// then decides.
#[derive(Deserialize)]
struct Top<'a> {
    #[serde(borrow)]
    metadata: Option<&'a RawValue>,
    /// Present even when `null`, as in the whole tree.
    #[serde(borrow, default, deserialize_with = "present")]
    status: Option<&'a RawValue>,
    #[serde(rename = "apiVersion", borrow)]
    api_version: Option<Cow<'a, str>>,
    #[serde(borrow)]
    kind: Option<Cow<'a, str>>,
    /// Read for `spec.suspend` alone ([`SpecParts`]), the rest skipped unread.
    #[serde(borrow, default)]
    spec: Option<&'a RawValue>,
}

/// What the view takes of the spec: whether the job is suspended (Kueue creates jobs
/// suspended and admits them by unsuspending; a TrainJob or JobSet shows it nowhere else
/// until its controller writes a condition).
#[derive(Deserialize)]
struct SpecParts {
    #[serde(default)]
    suspend: Option<bool>,
}

/// A member that is there, whatever its value (`Option` alone would read `null` as absent).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

/// The metadata member found by position, to be cut out.
#[derive(Deserialize)]
struct MetaParts<'a> {
    #[serde(rename = "managedFields", borrow)]
    managed_fields: Option<&'a RawValue>,
}

/// The quick reading; `None` hands the object to the whole-tree reading.
fn quick(text: &str) -> Option<JobObject> {
    let top: Top<'_> = serde_json::from_str(text).ok()?;
    let (Some(meta), Some(_), Some(_)) = (top.metadata, top.api_version, top.kind) else {
        return None;
    };
    let meta_text = meta.get();
    if !meta_text.starts_with('{') {
        return None;
    }
    let parts: MetaParts<'_> = serde_json::from_str(meta_text).ok()?;
    let (text, meta_text) = match parts.managed_fields {
        None => (Arc::from(text), Cow::Borrowed(meta_text)),
        Some(managed) => {
            // The member's place in the metadata text, then in the object's.
            let cut = member_range(
                meta_text,
                "managedFields",
                within(meta_text, managed.get())?,
            )?;
            let offset = within(text, meta_text)?.start;
            let in_text = cut.start + offset..cut.end + offset;
            (
                Arc::from(without(text, in_text)),
                Cow::Owned(without(meta_text, cut)),
            )
        }
    };
    let metadata: ObjectMeta = serde_json::from_str(&meta_text).ok()?;
    let status = top
        .status
        .map(|raw| serde_json::from_str(raw.get()))
        .transpose()
        .ok()?;
    // A spec that is no object, or too deep to read, has no `suspend` for the view; the
    // object is still read (as the whole-tree reading does).
    let suspend = top
        .spec
        .filter(|raw| raw.get().starts_with('{'))
        .and_then(|raw| serde_json::from_str::<SpecParts>(raw.get()).ok())
        .and_then(|s| s.suspend)
        .map(Value::Bool);
    let view = status_view(status, deletion_timestamp(&metadata).ok()?, suspend);
    Some(JobObject {
        metadata,
        view,
        text,
        typed: true,
        unreadable: None,
    })
}

/// The whole-tree reading: everything a JSON object may be, the text written anew.
fn whole(text: &str) -> Result<JobObject, serde_json::Error> {
    let mut map = match serde_json::from_str::<Value>(text)? {
        Value::Object(map) => map,
        _ => {
            return Err(serde::de::Error::custom(
                "a job object must be a JSON object",
            ));
        }
    };
    let mut metadata = match map.remove("metadata") {
        Some(meta) => serde_json::from_value::<ObjectMeta>(meta)?,
        None => ObjectMeta::default(),
    };
    metadata.managed_fields = None;
    // As Kubernetes' own types read an object: `apiVersion` and `kind` count only when both
    // are text; otherwise neither is kept.
    let typed = matches!(
        (map.get("apiVersion"), map.get("kind")),
        (Some(Value::String(_)), Some(Value::String(_)))
    );
    if !typed {
        map.remove("apiVersion");
        map.remove("kind");
    }
    map.insert("metadata".into(), serde_json::to_value(&metadata)?);
    Ok(JobObject {
        view: view_of(&map),
        text: Arc::from(Value::Object(map).to_string()),
        metadata,
        typed,
        unreadable: None,
    })
}

/// The deletion time as jobrelay's metadata type reads it, for the view: taken from the read
/// metadata rather than the text, so both readings show it the same way (the type writes it
/// back in its own form: `00:00Z` comes out as `00:00:00Z`).
fn deletion_timestamp(metadata: &ObjectMeta) -> Result<Option<Value>, serde_json::Error> {
    metadata
        .deletion_timestamp
        .as_ref()
        .map(serde_json::to_value)
        .transpose()
}

/// The status view of a whole object.
fn view_of(object: &Map<String, Value>) -> Value {
    let deletion = object
        .get("metadata")
        .and_then(|m| m.get("deletionTimestamp"));
    let suspend = object
        .get("spec")
        .and_then(|s| s.get("suspend"))
        .filter(|v| v.is_boolean())
        .cloned();
    status_view(object.get("status").cloned(), deletion.cloned(), suspend)
}

/// `{"metadata": {"deletionTimestamp": …}, "spec": {"suspend": …}, "status": …}`, each part
/// present when given.
fn status_view(
    status: Option<Value>,
    deletion_timestamp: Option<Value>,
    suspend: Option<Value>,
) -> Value {
    let mut view = Map::new();
    if let Some(suspend) = suspend {
        let mut spec = Map::new();
        spec.insert("suspend".into(), suspend);
        view.insert("spec".into(), Value::Object(spec));
    }
    if let Some(status) = status {
        view.insert("status".into(), status);
    }
    if let Some(ts) = deletion_timestamp {
        let mut meta = Map::new();
        meta.insert("deletionTimestamp".into(), ts);
        view.insert("metadata".into(), Value::Object(meta));
    }
    Value::Object(view)
}

/// Where `part`, a slice of `text`, lies in it.
fn within(text: &str, part: &str) -> Option<Range<usize>> {
    let start = (part.as_ptr() as usize).checked_sub(text.as_ptr() as usize)?;
    let end = start.checked_add(part.len())?;
    (end <= text.len()).then_some(start..end)
}

/// `text` without the bytes in `cut`.
fn without(text: &str, cut: Range<usize>) -> String {
    let mut out = String::with_capacity(text.len() - cut.len());
    out.push_str(&text[..cut.start]);
    out.push_str(&text[cut.end..]);
    out
}

/// In the text of a JSON object, the range that removing the member `key` (its value at
/// `value`) takes out: the key, the colon, the value and one comma beside them, so what is
/// left is the same object without that member. `None` when the key is not written plainly
/// just before its value (escaped characters in it), which the caller then reads another way.
fn member_range(object: &str, key: &str, value: Range<usize>) -> Option<Range<usize>> {
    const WS: &[char] = &[' ', '\t', '\n', '\r'];
    let before = object[..value.start].trim_end_matches(WS);
    let before = before.strip_suffix(':')?.trim_end_matches(WS);
    let before = before
        .strip_suffix('"')?
        .strip_suffix(key)?
        .strip_suffix('"')?;
    let key_start = before.len();
    let ahead_of_key = before.trim_end_matches(WS);
    if ahead_of_key.ends_with(',') {
        // Not the first member: take the comma before it.
        return Some(ahead_of_key.len() - 1..value.end);
    }
    if !ahead_of_key.ends_with('{') {
        return None;
    }
    let after = &object[value.end..];
    let rest = after.trim_start_matches(WS);
    let skipped = after.len() - rest.len();
    if rest.starts_with(',') {
        // The first member of several: take the comma after it.
        return Some(key_start..value.end + skipped + 1);
    }
    rest.starts_with('}').then_some(key_start..value.end)
}

#[cfg(test)]
mod tests;
