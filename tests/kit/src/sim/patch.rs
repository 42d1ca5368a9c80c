//! PATCH bodies: JSON merge patch (RFC 7386), JSON patch (RFC 6902) and the two Kubernetes
//! variants the simulator approximates with merge semantics.
//!
//! The daemon's finalizer handling uses JSON patch with a `test` op so that a concurrent change
//! makes the patch fail instead of clobbering it; status writers use merge patch. The RFC work
//! is done by the `json-patch` crate; this module maps content types to patch kinds and maps
//! failures to the apiserver's status codes (a malformed patch is 400, a patch that does not
//! apply, including a failed `test`, is 422).

use serde_json::Value;

use super::status::SimError;

/// The patch flavours, chosen by the request's `Content-Type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchKind {
    /// `application/merge-patch+json`.
    Merge,
    /// `application/strategic-merge-patch+json`. Approximated by a merge patch: lists are
    /// replaced wholesale instead of merged by key, and `$patch` directives are not understood.
    StrategicMerge,
    /// `application/json-patch+json`.
    Json,
    /// `application/apply-patch+yaml` (server-side apply). Approximated by a merge patch that
    /// creates the object when it is missing; field ownership is not tracked.
    Apply,
}

impl PatchKind {
    /// Maps a `Content-Type` (parameters ignored) to a patch kind; `None` means 415.
    pub fn from_content_type(content_type: &str) -> Option<PatchKind> {
        let essence = content_type
            .split(';')
            .next()
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase();
        match essence.as_str() {
            "application/merge-patch+json" => Some(PatchKind::Merge),
            "application/strategic-merge-patch+json" => Some(PatchKind::StrategicMerge),
            "application/json-patch+json" => Some(PatchKind::Json),
            "application/apply-patch+yaml" | "application/apply-patch+cbor" => {
                Some(PatchKind::Apply)
            }
            _ => None,
        }
    }
}

/// A decoded patch document, ready to apply.
#[derive(Clone, Debug)]
pub enum PatchBody {
    /// Merge-style patch (merge, strategic merge, apply).
    Merge(Value),
    /// RFC 6902 operations.
    Json(json_patch::Patch),
}

impl PatchBody {
    /// Decodes the request body for the given kind. Apply bodies may be YAML.
    pub fn decode(kind: PatchKind, body: &[u8]) -> Result<PatchBody, SimError> {
        match kind {
            PatchKind::Json => {
                let value: Value = serde_json::from_slice(body)
                    .map_err(|e| SimError::bad_request(format!("error decoding patch: {e}")))?;
                let ops: json_patch::Patch = serde_json::from_value(value)
                    .map_err(|e| SimError::bad_request(format!("error decoding patch: {e}")))?;
                Ok(PatchBody::Json(ops))
            }
            PatchKind::Merge | PatchKind::StrategicMerge => {
                let value: Value = serde_json::from_slice(body)
                    .map_err(|e| SimError::bad_request(format!("error decoding patch: {e}")))?;
                if !value.is_object() {
                    return Err(SimError::bad_request("a merge patch must be a JSON object"));
                }
                Ok(PatchBody::Merge(value))
            }
            PatchKind::Apply => {
                let value: Value = match serde_json::from_slice(body) {
                    Ok(v) => v,
                    Err(_) => serde_yaml_ng::from_slice(body)
                        .map_err(|e| SimError::bad_request(format!("error decoding YAML: {e}")))?,
                };
                if !value.is_object() {
                    return Err(SimError::bad_request("an apply patch must be an object"));
                }
                Ok(PatchBody::Merge(value))
            }
        }
    }

    /// Applies the patch to a copy of `current` and returns the result; `current` is never
    /// modified, so a failing patch leaves the stored object untouched.
    pub fn apply_to(&self, current: &Value) -> Result<Value, SimError> {
        let mut doc = current.clone();
        match self {
            PatchBody::Merge(patch) => json_patch::merge(&mut doc, patch),
            PatchBody::Json(ops) => {
                // `patch_unsafe` may leave `doc` half-patched on error, which is fine because
                // `doc` is a scratch copy that is discarded on error.
                json_patch::patch_unsafe(&mut doc, ops).map_err(|e| {
                    SimError::new(
                        422,
                        format!(
                            "the server rejected our request due to an error in our request: {e}"
                        ),
                    )
                })?;
            }
        }
        if !doc.is_object() {
            return Err(SimError::new(422, "the patched document is not an object"));
        }
        Ok(doc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn json_patch(ops: Value) -> PatchBody {
        PatchBody::decode(PatchKind::Json, ops.to_string().as_bytes()).unwrap()
    }

    #[test]
    fn merge_patch_rfc7386() {
        let doc = json!({ "a": "b", "c": { "d": "e", "f": "g" }, "l": [1, 2] });
        let patch = PatchBody::decode(
            PatchKind::Merge,
            br#"{ "a": "z", "c": { "f": null, "h": 1 }, "l": [3] }"#,
        )
        .unwrap();
        let out = patch.apply_to(&doc).unwrap();
        assert_eq!(
            out,
            json!({ "a": "z", "c": { "d": "e", "h": 1 }, "l": [3] })
        );
        assert_eq!(doc["a"], "b", "input untouched");
    }

    #[test]
    fn json_patch_ops_and_escaping() {
        let doc =
            json!({ "metadata": { "annotations": { "a/b": "1", "m~n": "2" } }, "list": [1, 2] });
        let out = json_patch(json!([
            { "op": "test", "path": "/metadata/annotations/a~1b", "value": "1" },
            { "op": "replace", "path": "/metadata/annotations/m~0n", "value": "3" },
            { "op": "add", "path": "/list/-", "value": 9 },
            { "op": "add", "path": "/list/0", "value": 0 },
            { "op": "copy", "from": "/list/3", "path": "/copied" },
            { "op": "move", "from": "/copied", "path": "/moved" },
            { "op": "remove", "path": "/list/1" },
        ]))
        .apply_to(&doc)
        .unwrap();
        assert_eq!(
            out,
            json!({ "metadata": { "annotations": { "a/b": "1", "m~n": "3" } }, "list": [0, 2, 9], "moved": 9 })
        );
    }

    #[test]
    fn failing_test_op_is_422_and_changes_nothing() {
        let doc = json!({ "metadata": { "finalizers": ["x"] } });
        let err = json_patch(json!([
            { "op": "remove", "path": "/metadata/finalizers/0" },
            { "op": "test", "path": "/metadata/finalizers", "value": ["y"] },
        ]))
        .apply_to(&doc)
        .unwrap_err();
        assert_eq!(err.code, 422);
        assert_eq!(err.reason, "Invalid");
        assert_eq!(doc, json!({ "metadata": { "finalizers": ["x"] } }));
    }

    #[test]
    fn malformed_patches_are_400() {
        assert_eq!(
            PatchBody::decode(PatchKind::Json, b"{").unwrap_err().code,
            400
        );
        assert_eq!(
            PatchBody::decode(PatchKind::Json, br#"[{"op":"nope","path":"/a"}]"#)
                .unwrap_err()
                .code,
            400
        );
        assert_eq!(
            PatchBody::decode(PatchKind::Merge, b"[1]")
                .unwrap_err()
                .code,
            400
        );
        assert!(PatchKind::from_content_type("text/plain").is_none());
        assert_eq!(
            PatchKind::from_content_type("application/merge-patch+json; charset=utf-8"),
            Some(PatchKind::Merge)
        );
    }

    #[test]
    fn apply_accepts_yaml() {
        let p = PatchBody::decode(PatchKind::Apply, b"metadata:\n  labels:\n    a: b\n").unwrap();
        let out = p.apply_to(&json!({ "metadata": { "name": "x" } })).unwrap();
        assert_eq!(
            out,
            json!({ "metadata": { "name": "x", "labels": { "a": "b" } } })
        );
    }
}
