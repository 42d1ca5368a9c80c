//! Small helpers for reading and writing `metadata` of untyped objects, plus the generators the
//! apiserver uses for system fields (uid, timestamps, generated names).
//!
//! Objects are kept as `serde_json::Value` so any CRD can be stored without a schema; these
//! helpers keep the field paths in one place.

use serde_json::{Map, Value};

/// `metadata.<field>` as a string, or `""` when absent.
pub(crate) fn meta_str<'a>(obj: &'a Value, field: &str) -> &'a str {
    obj.get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// The `metadata` map, created when missing. Callers make sure `obj` is an object.
pub(crate) fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.is_object() {
        *obj = Value::Object(Map::new());
    }
    let map = match obj {
        Value::Object(map) => map,
        _ => unreachable_object(),
    };
    let meta = map
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    match meta {
        Value::Object(m) => m,
        _ => unreachable_object(),
    }
}

// Both call sites have just replaced a non-object with an object.
fn unreachable_object() -> ! {
    unreachable!("value was just made an object")
}

/// Sets or removes `metadata.<field>`.
pub(crate) fn set_meta(obj: &mut Value, field: &str, value: Option<Value>) {
    let meta = meta_mut(obj);
    match value {
        Some(v) => {
            meta.insert(field.to_string(), v);
        }
        None => {
            meta.remove(field);
        }
    }
}

/// `metadata.finalizers` as strings (non-strings are ignored).
pub(crate) fn finalizers(obj: &Value) -> Vec<String> {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// Whether `metadata.deletionTimestamp` is set.
pub(crate) fn is_deleting(obj: &Value) -> bool {
    obj.pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
}

/// `metadata.generation`, 0 when absent.
pub(crate) fn generation(obj: &Value) -> i64 {
    obj.pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(0)
}

/// UIDs named in `metadata.ownerReferences`.
pub(crate) fn owner_uids(obj: &Value) -> Vec<String> {
    obj.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .map(|refs| {
            refs.iter()
                .filter_map(|r| r.get("uid").and_then(Value::as_str))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// The current time in the apiserver's RFC 3339 form (whole seconds, `Z`).
pub(crate) fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// A random version-4 UUID, the shape of `metadata.uid`.
pub(crate) fn new_uid() -> String {
    let a = fastrand::u32(..);
    let b = fastrand::u16(..);
    let c = fastrand::u16(..) & 0x0fff | 0x4000;
    let d = fastrand::u16(..) & 0x3fff | 0x8000;
    let e = fastrand::u64(..) & 0xffff_ffff_ffff;
    format!("{a:08x}-{b:04x}-{c:04x}-{d:04x}-{e:012x}")
}

/// Five characters from the alphabet the apiserver uses for `generateName` suffixes.
pub(crate) fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..5)
        .map(|_| ALPHABET[fastrand::usize(..ALPHABET.len())] as char)
        .collect()
}

/// A random bearer token.
pub(crate) fn new_token() -> String {
    format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..))
}

/// Whether `name` is a lowercase RFC 1123 subdomain, the rule for most object names.
pub(crate) fn is_dns_subdomain(name: &str) -> bool {
    name.len() <= 253
        && !name.is_empty()
        && name.split('.').all(|label| {
            !label.is_empty()
                && label
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn uid_shape() {
        let uid = new_uid();
        assert_eq!(uid.len(), 36);
        assert_eq!(&uid[14..15], "4");
    }

    #[test]
    fn names() {
        assert!(is_dns_subdomain("train-job.v1"));
        assert!(!is_dns_subdomain("Train"));
        assert!(!is_dns_subdomain("-x"));
        assert!(!is_dns_subdomain("a..b"));
        assert!(!is_dns_subdomain(""));
    }

    #[test]
    fn meta_helpers() {
        let mut o = json!({ "metadata": { "name": "a", "finalizers": ["x", 1] } });
        assert_eq!(meta_str(&o, "name"), "a");
        assert_eq!(finalizers(&o), vec!["x".to_string()]);
        set_meta(&mut o, "uid", Some(json!("u")));
        assert_eq!(meta_str(&o, "uid"), "u");
        set_meta(&mut o, "uid", None);
        assert_eq!(meta_str(&o, "uid"), "");
        let mut not_obj = json!(3);
        set_meta(&mut not_obj, "name", Some(json!("n")));
        assert_eq!(meta_str(&not_obj, "name"), "n");
    }
}
