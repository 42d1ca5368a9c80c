//! API errors and their `Status` bodies.
//!
//! Every failure the real apiserver reports comes back as a `meta/v1 Status` object whose
//! `code`, `reason` and `message` clients inspect (kube's `ErrorResponse`, `is_conflict()`-style
//! checks in controllers). The simulator builds the same shapes with the same reasons and
//! message wording, so error handling in the code under test is exercised as in production.

use serde_json::{Value, json};

use super::resources::Gvr;

/// An API error: what the HTTP layer turns into a `Status` response, and what the in-process
/// driver API returns.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct SimError {
    /// HTTP status code.
    pub code: u16,
    /// Machine-readable reason, e.g. `NotFound`, `Conflict`, `Expired`.
    pub reason: String,
    /// Human-readable message, worded like the apiserver's.
    pub message: String,
    /// `details` of the Status (name, group, kind), when known.
    pub details: Option<Value>,
}

impl SimError {
    /// An error with the conventional reason for its code.
    pub fn new(code: u16, message: impl Into<String>) -> SimError {
        SimError {
            code,
            reason: reason_for(code).to_string(),
            message: message.into(),
            details: None,
        }
    }

    /// An error with an explicit reason.
    pub fn with_reason(code: u16, reason: &str, message: impl Into<String>) -> SimError {
        SimError {
            code,
            reason: reason.to_string(),
            message: message.into(),
            details: None,
        }
    }

    fn about(mut self, gvr: &Gvr, name: &str) -> SimError {
        let mut details = json!({ "kind": gvr.plural });
        if !name.is_empty() {
            details["name"] = json!(name);
        }
        if !gvr.group.is_empty() {
            details["group"] = json!(gvr.group);
        }
        self.details = Some(details);
        self
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> SimError {
        SimError::new(400, message)
    }

    pub(crate) fn not_found(gvr: &Gvr, name: &str) -> SimError {
        SimError::new(
            404,
            format!("{} \"{name}\" not found", gvr.group_resource()),
        )
        .about(gvr, name)
    }

    pub(crate) fn already_exists(gvr: &Gvr, name: &str) -> SimError {
        SimError::with_reason(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", gvr.group_resource()),
        )
        .about(gvr, name)
    }

    /// Optimistic-concurrency failure: the object changed since the client read it.
    pub(crate) fn conflict(gvr: &Gvr, name: &str, why: &str) -> SimError {
        SimError::with_reason(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                gvr.group_resource()
            ),
        )
        .about(gvr, name)
    }

    pub(crate) fn stale(gvr: &Gvr, name: &str) -> SimError {
        SimError::conflict(
            gvr,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// Validation failure (422 Invalid), e.g. a forbidden field change.
    pub(crate) fn invalid(
        gvr: &Gvr,
        kind: &str,
        name: &str,
        field: &str,
        cause: &str,
        detail: &str,
    ) -> SimError {
        let qualified = if gvr.group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{}", gvr.group)
        };
        let message = format!("{qualified} \"{name}\" is invalid: {field}: {detail}");
        let mut err = SimError::with_reason(422, "Invalid", message).about(gvr, name);
        if let Some(details) = err.details.as_mut() {
            details["kind"] = json!(kind);
            details["causes"] = json!([{ "reason": cause, "message": detail, "field": field }]);
        }
        err
    }

    /// A resourceVersion (or continue token) older than the compaction horizon.
    pub(crate) fn expired(message: impl Into<String>) -> SimError {
        SimError::with_reason(410, "Expired", message)
    }

    pub(crate) fn method_not_allowed(message: impl Into<String>) -> SimError {
        SimError::new(405, message)
    }

    /// The `meta/v1 Status` object for this error.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(details) = &self.details {
            status["details"] = details.clone();
        }
        status
    }
}

/// The `reason` the apiserver uses for a status code when nothing more specific applies.
pub fn reason_for(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        405 => "MethodNotAllowed",
        406 => "NotAcceptable",
        409 => "Conflict",
        410 => "Expired",
        413 => "RequestEntityTooLarge",
        415 => "UnsupportedMediaType",
        422 => "Invalid",
        429 => "TooManyRequests",
        500 => "InternalError",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "Unknown",
    }
}
