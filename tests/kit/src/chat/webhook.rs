//! The contract of a generic webhook taking CloudEvents 1.0 over HTTP (the CloudEvents HTTP
//! protocol binding), signed as the Standard Webhooks specification (standardwebhooks.com)
//! says: `POST /hooks/TOKEN`.
//!
//! The answers are plain: HTTP 204 for an accepted event, 404 for an unknown token, 429 with
//! `Retry-After: 1` when throttled (only by [`throttle_next`](super::ChatReceiver::throttle_next):
//! there is no real rate limit). After the shared steps ([`super`]), the checks run in this
//! order, and the first that fails decides:
//!
//! 1. with a secret: headers `webhook-id` (non-empty), `webhook-timestamp` (unix seconds within
//!    [`MAX_CLOCK_SKEW_SECS`] of now) and `webhook-signature`, a space-separated list of
//!    `v1,<Base64 of HMAC-SHA256 over "{webhook-id}.{webhook-timestamp}.{raw body}">` of which
//!    any one entry must match (entries of other versions are skipped). The key is the
//!    Base64-decoded part of a secret written `whsec_<base64>`; a secret without that prefix is
//!    used as is, its UTF-8 bytes the key (and a `whsec_` secret that does not decode matches
//!    nothing). Else HTTP 401 `bad signature`. The signature check comes before the event's:
//!    an unauthenticated request learns nothing about what a valid event is;
//! 2. the event, in one of the two modes of the HTTP binding (see [`mode`]), else HTTP 400 with
//!    a body naming what is missing or wrong:
//!    - *structured*: Content-Type `application/cloudevents+json` (parameters allowed; other
//!      formats and batches are refused), the body a JSON object: the whole event, `data` (or
//!      `data_base64`, a string, not both) among its members;
//!    - *binary*: a `ce-specversion` header; the attributes are the `ce-*` headers (the name
//!      after `ce-`), the Content-Type is `datacontenttype` and the body is `data`;
//!
//!    and in both, `specversion` `1.0`, non-empty `id`, `source` and `type`; `datacontenttype`,
//!    `dataschema`, `subject` and `time` (RFC 3339) non-empty strings if present; every
//!    attribute name lowercase `a-z0-9` and at most 20 characters; extension attribute values
//!    strings, numbers, booleans or `null` (structured mode).
//!
//! An accepted event is recorded with its request headers, so [`Received::cloudevents_mode`]
//! tells the modes apart; its body is the whole event in structured mode, the data in binary
//! mode (see [`Received::body`]).
//!
//! Knowingly simplified: binary-mode header values are taken as sent, not percent-decoded; a
//! `ce-datacontenttype` header in binary mode is not refused; `dataschema` and `source` are not
//! checked to be URI references; `data_base64` is not decoded; a signature is compared as
//! Base64 text, so only the standard alphabet with padding matches.
//!
//! [`Received::cloudevents_mode`]: super::Received::cloudevents_mode
//! [`Received::body`]: super::Received::body

use anyhow::Context as _;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use chrono::{DateTime, Utc};
use serde_json::Value;

use super::{Accepted, Answer, BotConfig, Contract, Inbound, Route, Verdict};

/// Where the stand-in serves hooks; the token follows.
pub const PATH_PREFIX: &str = "/hooks/";
/// How far `webhook-timestamp` may be from the receiver's clock, either way: five minutes.
pub const MAX_CLOCK_SKEW_SECS: i64 = 5 * 60;
/// The structured mode's Content-Type (with the JSON event format).
pub const STRUCTURED_CONTENT_TYPE: &str = "application/cloudevents+json";
/// The longest attribute name.
pub const MAX_ATTRIBUTE_NAME: usize = 20;

/// The attributes the CloudEvents 1.0 specification defines; all others are extensions.
const SPEC_ATTRIBUTES: [&str; 8] = [
    "specversion",
    "id",
    "source",
    "type",
    "datacontenttype",
    "dataschema",
    "subject",
    "time",
];

/// How an event travels over HTTP (CloudEvents HTTP protocol binding 1.0, section 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The whole event in the body, as `application/cloudevents+json`.
    Structured,
    /// The attributes in `ce-*` headers, the data as the body.
    Binary,
}

/// The mode of a request with `headers` (names lower-cased), as the binding tells them apart:
/// a Content-Type starting `application/cloudevents` is structured mode, else a
/// `ce-specversion` header is binary mode, else it is no CloudEvent.
pub fn mode(headers: &[(String, String)]) -> Option<Mode> {
    let media = super::media_type(headers).unwrap_or_default();
    if media.starts_with("application/cloudevents") {
        Some(Mode::Structured)
    } else {
        super::find_header(headers, "ce-specversion").map(|_| Mode::Binary)
    }
}

/// The `webhook-signature` entry for a message: `v1,` and the Base64 HMAC-SHA256 over
/// `"{id}.{timestamp}.{body}"`, keyed with the Base64-decoded part of a `whsec_` secret, or with
/// the UTF-8 bytes of a secret without that prefix. Fails for a `whsec_` secret that is not
/// Base64.
pub fn sign(id: &str, timestamp: i64, body: &[u8], secret: &str) -> anyhow::Result<String> {
    let key = key_of(secret)?;
    Ok(format!(
        "v1,{}",
        signature(&key, id, &timestamp.to_string(), body)
    ))
}

fn key_of(secret: &str) -> anyhow::Result<Vec<u8>> {
    match secret.strip_prefix("whsec_") {
        Some(encoded) => BASE64
            .decode(encoded)
            .context("the part of a whsec_ secret after the prefix is not Base64"),
        None => Ok(secret.as_bytes().to_vec()),
    }
}

/// The Base64 part of a signature over the timestamp as written.
fn signature(key: &[u8], id: &str, timestamp: &str, body: &[u8]) -> String {
    super::hmac_base64(
        key,
        &[id.as_bytes(), b".", timestamp.as_bytes(), b".", body],
    )
}

pub(super) fn contract() -> Contract {
    let throttled = Answer::text(429, "too many requests");
    Contract {
        route: Route::PathTail {
            prefix: PATH_PREFIX,
        },
        unknown: Answer::text(404, "no such hook"),
        throttled: throttled.retry_after(1),
        accepted: Answer::no_content(),
        limit: None,
        judge,
    }
}

/// Checks 1 and 2 of the [module docs](self).
fn judge(req: &Inbound, bot: &BotConfig, now: DateTime<Utc>) -> Verdict {
    let signed = bot.verify(|secret| {
        let checked = check_signature(req, secret, now);
        checked.map_err(|why| Answer::text(401, "bad signature").because(why))
    })?;
    let event = match mode(&req.headers) {
        Some(Mode::Structured) => structured(req),
        Some(Mode::Binary) => binary(req),
        None => Err(format!(
            "not a CloudEvent: no Content-Type {STRUCTURED_CONTENT_TYPE} (structured mode) \
             and no ce-specversion header (binary mode)"
        )),
    };
    let body = event.map_err(|why| Answer::text(400, why))?;
    Ok(Accepted { body, signed })
}

/// Check 1; `Err` says what is wrong, for the refusal line.
fn check_signature(req: &Inbound, secret: &str, now: DateTime<Utc>) -> Result<(), String> {
    let header = |name: &str| {
        let value = req.header(name).filter(|v| !v.is_empty());
        value.ok_or_else(|| format!("no {name} header"))
    };
    let (id, timestamp) = (header("webhook-id")?, header("webhook-timestamp")?);
    let entries = header("webhook-signature")?;
    let seconds: i64 = timestamp
        .parse()
        .map_err(|_| format!("webhook-timestamp `{timestamp}` is not unix seconds"))?;
    if seconds.abs_diff(now.timestamp()) > MAX_CLOCK_SKEW_SECS.unsigned_abs() {
        return Err(format!(
            "webhook-timestamp {seconds} is over 5 minutes away"
        ));
    }
    let key = key_of(secret).map_err(|e| e.to_string())?;
    let expected = signature(&key, id, timestamp, &req.body);
    let mut versioned = entries
        .split_whitespace()
        .filter_map(|e| e.strip_prefix("v1,"));
    if versioned.any(|candidate| candidate == expected) {
        Ok(())
    } else {
        Err("no v1 entry matches".into())
    }
}

/// A structured-mode event: the body, checked.
fn structured(req: &Inbound) -> Result<Value, String> {
    let media = req.media_type().unwrap_or_default();
    if media != STRUCTURED_CONTENT_TYPE {
        return Err(format!(
            "unsupported event format `{media}`: only {STRUCTURED_CONTENT_TYPE}, one event"
        ));
    }
    let event: Value =
        serde_json::from_slice(&req.body).map_err(|e| format!("the event is not JSON: {e}"))?;
    let members = event.as_object().ok_or("the event is not a JSON object")?;
    if let Some(encoded) = members.get("data_base64") {
        if members.contains_key("data") {
            return Err("both data and data_base64".into());
        }
        if !encoded.is_string() {
            return Err("data_base64 is not a string".into());
        }
    }
    let attributes = members
        .iter()
        .filter(|(name, _)| !matches!(name.as_str(), "data" | "data_base64"));
    let attributes: Vec<(&str, &Value)> = attributes.map(|(n, v)| (n.as_str(), v)).collect();
    check_attributes(&attributes, |name| format!("attribute `{name}`"))?;
    Ok(event)
}

/// A binary-mode event: the data, from the body (see [`super::Received::body`]).
fn binary(req: &Inbound) -> Result<Value, String> {
    let headers = req.headers.iter().filter_map(|(name, value)| {
        let attribute = name.strip_prefix("ce-")?;
        Some((attribute, Value::String(value.clone())))
    });
    let headers: Vec<(&str, Value)> = headers.collect();
    let attributes: Vec<(&str, &Value)> = headers.iter().map(|(n, v)| (*n, v)).collect();
    check_attributes(&attributes, |name| format!("header ce-{name}"))?;
    if req.body.is_empty() {
        return Ok(Value::Null);
    }
    let media = req.media_type();
    let json = media.is_none_or(|m| m == "application/json" || m.ends_with("+json"));
    let parsed = json
        .then(|| serde_json::from_slice(&req.body).ok())
        .flatten();
    Ok(parsed.unwrap_or_else(|| Value::String(String::from_utf8_lossy(&req.body).into())))
}

/// The checks both modes share; `label` names an attribute as the mode spells it.
fn check_attributes(
    attributes: &[(&str, &Value)],
    label: impl Fn(&str) -> String,
) -> Result<(), String> {
    let value = |wanted: &str| attributes.iter().find(|(name, _)| *name == wanted);
    if let Some(missing) = ["specversion", "id", "source", "type"]
        .into_iter()
        .find(|&required| value(required).is_none())
    {
        return Err(format!("missing {}", label(missing)));
    }
    for &(name, value) in attributes {
        let valid_name = name.len() <= MAX_ATTRIBUTE_NAME
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
        if !valid_name {
            return Err(format!(
                "bad name {}: lowercase a-z and 0-9, at most {MAX_ATTRIBUTE_NAME} characters",
                label(name)
            ));
        }
        check_value(name, value).map_err(|why| format!("{} {why}", label(name)))?;
    }
    Ok(())
}

/// One attribute's value: the specification's own are non-empty strings of their kind,
/// extensions are scalars.
fn check_value(name: &str, value: &Value) -> Result<(), &'static str> {
    if !SPEC_ATTRIBUTES.contains(&name) {
        return match value {
            Value::Array(_) | Value::Object(_) => Err("is not a string, number or boolean"),
            _ => Ok(()),
        };
    }
    match (name, value.as_str()) {
        (_, None) => Err("is not a string"),
        (_, Some("")) => Err("is empty"),
        ("specversion", Some(version)) if version != "1.0" => Err("is not 1.0"),
        ("time", Some(time)) if DateTime::parse_from_rfc3339(time).is_err() => {
            Err("is not an RFC 3339 time")
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::super::Received;
    use super::super::testing::*;
    use super::*;

    /// Standard Webhooks' own example (its specification and reference libraries).
    const SPEC_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const SPEC_ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const SPEC_TIMESTAMP: i64 = 1_614_265_330;
    const SPEC_BODY: &str = r#"{"test": 2432232314}"#;
    const SPEC_SIGNATURE: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";
    /// The required attributes of a binary-mode event.
    const BINARY: [(&str, &str); 4] = [
        ("ce-specversion", "1.0"),
        ("ce-id", "e-1"),
        ("ce-source", "/jobrelay"),
        ("ce-type", "job.failed"),
    ];
    const EVENT: &str = r#"{"specversion":"1.0","id":"e-1","source":"/jobrelay","type":"job.succeeded","data":{"job":"job-7"}}"#;

    fn judge_with(secret: Option<&str>, headers: &[(&str, &str)], body: &str) -> String {
        let secret = secret.map(str::to_string);
        let bot = BotConfig {
            secret,
            keyword: None,
        };
        let req = post("/hooks/t", headers, body.to_string());
        outcome(judge(&req, &bot, at(SPEC_TIMESTAMP)))
    }

    /// Structured-mode headers signed with `signature` at `timestamp`.
    fn signed(timestamp: &str, signature: &str) -> Vec<(&'static str, String)> {
        vec![
            ("content-type", STRUCTURED_CONTENT_TYPE.to_string()),
            ("webhook-id", SPEC_ID.to_string()),
            ("webhook-timestamp", timestamp.to_string()),
            ("webhook-signature", signature.to_string()),
        ]
    }

    fn judge_signed(headers: &[(&'static str, String)], body: &str) -> String {
        let headers: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
        judge_with(Some(SPEC_SECRET), &headers, body)
    }

    #[test]
    fn sign_matches_the_specifications_example_and_an_outside_vector() {
        let body = SPEC_BODY.as_bytes();
        let spec = sign(SPEC_ID, SPEC_TIMESTAMP, body, SPEC_SECRET).expect("a valid secret");
        assert_eq!(spec, SPEC_SIGNATURE);
        // A secret without `whsec_`: its UTF-8 bytes are the key (python3's hmac module).
        let plain = sign("msg_1", 1_700_000_000, br#"{"a":1}"#, "plain-secret").expect("any text");
        assert_eq!(plain, "v1,PQ8G/5vQE995TQFlpC2YXRDs2RbuscvSWFk9pfKhuhc=");
        assert!(sign("m", 0, b"", "whsec_not*base64").is_err());
    }

    #[test]
    fn any_matching_v1_entry_of_a_fresh_message_passes() {
        let ts = SPEC_TIMESTAMP.to_string();
        // The specification's example is no CloudEvent: signature checks come first, so a good
        // one gets as far as the event check, and a bad one does not.
        let past_signature = "HTTP 400: missing attribute `specversion`";
        let bad = |why: &str| format!("HTTP 401: bad signature ({why})");
        let (stale, future) = (
            (SPEC_TIMESTAMP - 301).to_string(),
            (SPEC_TIMESTAMP + 301).to_string(),
        );
        let several = format!("v1,bm90IGl0 v1a,{} {SPEC_SIGNATURE}", &SPEC_SIGNATURE[3..]);
        let cases = [
            (signed(&ts, SPEC_SIGNATURE), past_signature.to_string()),
            (signed(&ts, &several), past_signature.into()),
            (signed(&ts, "v1,bm90IGl0"), bad("no v1 entry matches")),
            (
                signed(&ts, &format!("v1a,{}", &SPEC_SIGNATURE[3..])),
                bad("no v1 entry matches"),
            ),
            (
                signed(&ts, &SPEC_SIGNATURE[3..]),
                bad("no v1 entry matches"),
            ),
            (
                signed(&stale, SPEC_SIGNATURE),
                bad(&format!("webhook-timestamp {stale} is over 5 minutes away")),
            ),
            (
                signed(&future, SPEC_SIGNATURE),
                bad(&format!(
                    "webhook-timestamp {future} is over 5 minutes away"
                )),
            ),
            (
                signed("soon", SPEC_SIGNATURE),
                bad("webhook-timestamp `soon` is not unix seconds"),
            ),
            (
                signed(&ts, SPEC_SIGNATURE)[..3].to_vec(),
                bad("no webhook-signature header"),
            ),
            (
                signed(&ts, SPEC_SIGNATURE)[..1].to_vec(),
                bad("no webhook-id header"),
            ),
        ];
        for (headers, expected) in cases {
            assert_eq!(judge_signed(&headers, SPEC_BODY), expected, "{headers:?}");
        }
        // Another body under the same signature fails.
        let other = signed(&ts, SPEC_SIGNATURE);
        assert_eq!(
            judge_signed(&other, r#"{"test": 1}"#),
            bad("no v1 entry matches")
        );
        // Within five minutes either way is fresh.
        let edge = (SPEC_TIMESTAMP - 300).to_string();
        let edge_signature = sign(SPEC_ID, SPEC_TIMESTAMP - 300, EVENT.as_bytes(), SPEC_SECRET);
        let edge = signed(&edge, &edge_signature.expect("a valid secret"));
        assert_eq!(judge_signed(&edge, EVENT), "accepted, signed");
        // A bot without a secret ignores every signature.
        let headers = [
            ("content-type", STRUCTURED_CONTENT_TYPE),
            ("webhook-signature", "v1,x"),
        ];
        assert_eq!(judge_with(None, &headers, EVENT), "accepted");
    }

    #[test]
    fn structured_events_are_checked() {
        let structured = [(
            "Content-Type",
            "application/cloudevents+json; charset=UTF-8",
        )];
        let with = |extra: Value| {
            let mut event: Value = serde_json::from_str(EVENT).expect("JSON");
            event
                .as_object_mut()
                .expect("an object")
                .extend(extra.as_object().cloned().unwrap_or_default());
            judge_with(None, &structured, &event.to_string())
        };
        let refused = |why: &str| format!("HTTP 400: {why}");
        let long_name = "a".repeat(21);
        let cases = [
            (
                json!({ "time": "2026-01-02T03:04:05.678Z", "subject": "job-7", "datacontenttype": "application/json", "dataschema": "https://s", "cluster": "east", "attempt": 2, "retried": false, "none": null }),
                "accepted".to_string(),
            ),
            (
                json!({ "specversion": "0.3" }),
                refused("attribute `specversion` is not 1.0"),
            ),
            (json!({ "id": "" }), refused("attribute `id` is empty")),
            (
                json!({ "source": 7 }),
                refused("attribute `source` is not a string"),
            ),
            (
                json!({ "time": "yesterday" }),
                refused("attribute `time` is not an RFC 3339 time"),
            ),
            (
                json!({ "subject": "" }),
                refused("attribute `subject` is empty"),
            ),
            (
                json!({ "Cluster": "east" }),
                refused(
                    "bad name attribute `Cluster`: lowercase a-z and 0-9, at most 20 characters",
                ),
            ),
            (
                json!({ "job_name": "x" }),
                refused(
                    "bad name attribute `job_name`: lowercase a-z and 0-9, at most 20 characters",
                ),
            ),
            (
                json!({ long_name.clone(): "x" }),
                refused(&format!(
                    "bad name attribute `{long_name}`: lowercase a-z and 0-9, at most 20 characters"
                )),
            ),
            (
                json!({ "labels": { "a": "b" } }),
                refused("attribute `labels` is not a string, number or boolean"),
            ),
            (
                json!({ "data_base64": "aGk=" }),
                refused("both data and data_base64"),
            ),
        ];
        for (extra, expected) in cases {
            assert_eq!(with(extra.clone()), expected, "{extra}");
        }
        let base64_data =
            r#"{"specversion":"1.0","id":"1","source":"s","type":"t","data_base64":"aGk="}"#;
        assert_eq!(judge_with(None, &structured, base64_data), "accepted");
        let missing_type = r#"{"specversion":"1.0","id":"1","source":"s"}"#;
        assert_eq!(
            judge_with(None, &structured, missing_type),
            refused("missing attribute `type`")
        );
        assert!(judge_with(None, &structured, "{").starts_with("HTTP 400: the event is not JSON"));
        assert_eq!(
            judge_with(None, &structured, "[]"),
            refused("the event is not a JSON object")
        );
        let batch = [("content-type", "application/cloudevents-batch+json")];
        let unsupported = "HTTP 400: unsupported event format `application/cloudevents-batch+json`";
        assert!(judge_with(None, &batch, &format!("[{EVENT}]")).starts_with(unsupported));
    }

    #[test]
    fn binary_events_are_checked() {
        // `extra` replaces the base headers of the same name; a value of `-` removes one.
        let judge_binary = |extra: &[(&str, &str)], body: &str| {
            let replaced = |name: &&str| extra.iter().any(|(n, _)| n == name);
            let kept = BINARY.iter().filter(|(name, _)| !replaced(name));
            let added = extra.iter().filter(|(_, value)| *value != "-");
            let headers: Vec<(&str, &str)> = kept.chain(added).copied().collect();
            judge_with(None, &headers, body)
        };
        let json = [("content-type", "application/json")];
        let cases = [
            (vec![("ce-time", "2026-01-02T03:04:05+08:00"), ("ce-cluster", "east"), ("content-type", "text/plain")], "accepted".to_string()),
            (vec![("ce-type", "-")], "HTTP 400: missing header ce-type".into()),
            (vec![("ce-id", "")], "HTTP 400: header ce-id is empty".into()),
            (vec![("ce-specversion", "1.1")], "HTTP 400: header ce-specversion is not 1.0".into()),
            (vec![("ce-time", "noon")], "HTTP 400: header ce-time is not an RFC 3339 time".into()),
            (vec![("ce-job-name", "x")], "HTTP 400: bad name header ce-job-name: lowercase a-z and 0-9, at most 20 characters".into()),
        ];
        for (extra, expected) in cases {
            assert_eq!(judge_binary(&extra, "job-7 failed"), expected, "{extra:?}");
        }
        let neither = "HTTP 400: not a CloudEvent: no Content-Type application/cloudevents+json \
                       (structured mode) and no ce-specversion header (binary mode)";
        assert_eq!(judge_with(None, &json, EVENT), neither);
    }

    #[test]
    fn binary_data_is_json_when_it_says_so_and_text_otherwise() {
        let data = |content_type: Option<&str>, body: &str| {
            let mut headers: Vec<(&str, &str)> = BINARY.to_vec();
            headers.extend(content_type.map(|ct| ("content-type", ct)));
            let req = post("/hooks/t", &headers, body.to_string());
            judge(&req, &BotConfig::default(), at(0))
                .expect("accepted")
                .body
        };
        let cases = [
            (
                Some("application/json"),
                r#"{"job":"job-7"}"#,
                json!({ "job": "job-7" }),
            ),
            (
                Some("application/vnd.jobrelay+json; charset=utf-8"),
                "[1]",
                json!([1]),
            ),
            (None, "42", json!(42)),
            (Some("text/plain"), "42", json!("42")),
            (Some("application/json"), "not json", json!("not json")),
            (Some("text/plain"), "", Value::Null),
        ];
        for (content_type, body, expected) in cases {
            assert_eq!(
                data(content_type, body),
                expected,
                "{content_type:?} {body}"
            );
        }
    }

    #[test]
    fn received_binary_events_show_their_attributes_in_text() {
        let headers = [
            ("ce-type", "job.failed"),
            ("ce-specversion", "1.0"),
            ("content-type", "text/plain"),
        ];
        let received = |headers: &[(&str, &str)], body: Value| Received {
            body,
            headers: headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
            received_at: at(0),
            signed: false,
        };
        let binary = received(&headers, json!("job-7 failed"));
        assert_eq!(binary.cloudevents_mode(), Some(Mode::Binary));
        assert_eq!(binary.text(), "job.failed\n1.0\njob-7 failed");
        assert_eq!(binary.header("Content-Type"), Some("text/plain"));
        let structured = received(
            &[("content-type", STRUCTURED_CONTENT_TYPE)],
            json!({ "type": "t", "data": { "job": "j" } }),
        );
        assert_eq!(structured.cloudevents_mode(), Some(Mode::Structured));
        assert_eq!(structured.text(), "j\nt");
        let other = received(
            &[("content-type", "application/json")],
            json!({ "text": "x" }),
        );
        assert_eq!(other.cloudevents_mode(), None);
    }

    #[test]
    fn fixed_answers_are_plain_and_there_is_no_rate_limit() {
        assert!(contract().limit.is_none());
        let answers = [
            "404 no such hook",
            "429 too many requests (Retry-After: 1)",
            "204 ",
        ];
        assert_eq!(fixed_answers(contract()), answers);
    }
}
