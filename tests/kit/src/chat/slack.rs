//! The contract of a Slack incoming webhook: `POST /services/T…/B…/TOKEN` with a JSON message.
//! Incoming webhooks are not signed (the URL is the credential), so a bot's secret is ignored
//! and [`Received::signed`](super::Received::signed) is always false.
//!
//! Slack answers in plain text: HTTP 200 `ok` for a delivered message, 404 `no_service` for an
//! unknown webhook, and 429 `rate_limited` with `Retry-After: 1` when throttled. The real limit
//! is one message per second per webhook "with short bursts allowed"; this stand-in lets a burst
//! of [`BURST`] through, then one a second (a token bucket holding [`BURST`], refilled one per
//! second). After the shared steps ([`super`]), the checks run in this order, and the first that
//! fails decides (HTTP 400 with the body shown):
//!
//! 1. Content-Type not `application/json` (parameters allowed): `invalid_payload`;
//! 2. the body not a JSON object, or `text` present and not a string: `invalid_payload`;
//! 3. `blocks` present and not valid Block Kit: `invalid_blocks` (the refusal line says why).
//!    At most [`MAX_BLOCKS`] blocks of these types: `header` (`text`: plain_text, ≤150
//!    characters), `section` (`text`: plain_text or mrkdwn, ≤3000, and/or `fields`: 1 to 10 of
//!    those, each ≤2000; an `accessory`, if any, an object with a `type`), `context`
//!    (`elements`: 1 to 10 text objects or images with `image_url` and `alt_text`), `divider`,
//!    `actions` (`elements`: 1 to 25 buttons with `text` plain_text ≤75, optional `url` ≤3000,
//!    `action_id` ≤255, `value` ≤2000, `style` primary or danger); a `block_id`, if any, a string
//!    of 1 to 255 characters; every text non-empty;
//! 4. neither a non-empty `text` nor a non-empty `blocks`: `no_text`.
//!
//! Knowingly simplified: only the team and channel IDs in [`PATH_PREFIX`] are served (another
//! `T…/B…` pair is an unknown webhook); form-encoded `payload=` bodies, which Slack also takes,
//! are refused; other block types (image, input, rich_text, …) and interactive elements other
//! than buttons are refused; accessories and `attachments` are not validated; lengths are counted
//! in characters (Unicode scalar values).

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::{Accepted, Answer, BotConfig, Contract, Inbound, Limit, Route, Verdict};

/// Where the stand-in serves webhooks: a fixed team and channel, then the token.
pub const PATH_PREFIX: &str = "/services/T0JOBRELAY/B0JOBRELAY/";
/// Messages a webhook takes at once before the one-a-second limit applies.
pub const BURST: u32 = 3;
/// The most blocks in one message.
pub const MAX_BLOCKS: usize = 50;

/// The text object types every text field takes; some take only the first.
const ANY_TEXT: &[&str] = &["plain_text", "mrkdwn"];
const PLAIN_TEXT: &[&str] = &["plain_text"];

pub(super) fn contract() -> Contract {
    let every = Duration::from_secs(1);
    Contract {
        route: Route::PathTail {
            prefix: PATH_PREFIX,
        },
        unknown: Answer::text(404, "no_service"),
        throttled: Answer::text(429, "rate_limited").retry_after(1),
        accepted: Answer::text(200, "ok"),
        limit: Some(Limit::Bucket {
            burst: BURST,
            every,
        }),
        judge,
    }
}

/// Checks 1 to 4 of the [module docs](self).
fn judge(req: &Inbound, _bot: &BotConfig, _now: DateTime<Utc>) -> Verdict {
    let invalid_payload = |why: &str| Answer::text(400, "invalid_payload").because(why);
    if req.media_type().as_deref() != Some("application/json") {
        return Err(invalid_payload("Content-Type is not application/json"));
    }
    let message = serde_json::from_slice::<Value>(&req.body).unwrap_or_default();
    if !message.is_object() {
        return Err(invalid_payload("not a JSON object"));
    }
    let text = match message.get("text") {
        None | Some(Value::Null) => "",
        Some(Value::String(text)) => text,
        Some(_) => return Err(invalid_payload("text is not a string")),
    };
    let blocks = match message.get("blocks") {
        None | Some(Value::Null) => 0,
        Some(blocks) => {
            let why = validate_blocks(blocks);
            why.map_err(|why| Answer::text(400, "invalid_blocks").because(why))?
        }
    };
    if text.is_empty() && blocks == 0 {
        return Err(Answer::text(400, "no_text"));
    }
    Ok(Accepted {
        body: message,
        signed: false,
    })
}

/// Check 3: the number of blocks, or what is wrong as `blocks[i].path: problem`.
fn validate_blocks(blocks: &Value) -> Result<usize, String> {
    let blocks = blocks.as_array().ok_or("blocks: not an array")?;
    if blocks.len() > MAX_BLOCKS {
        return Err(format!("blocks: {} of at most {MAX_BLOCKS}", blocks.len()));
    }
    for (i, block) in blocks.iter().enumerate() {
        validate_block(block).map_err(|why| format!("blocks[{i}]{why}"))?;
    }
    Ok(blocks.len())
}

fn validate_block(block: &Value) -> Result<(), String> {
    let kind = block
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default();
    optional_string(block, "block_id", 255)?;
    match kind {
        "divider" => Ok(()),
        "header" => text_object(block.get("text"), PLAIN_TEXT, 150).map_err(under(".text")),
        "section" => section(block),
        "context" => list(block.get("elements"), 10, context_element).map_err(under(".elements")),
        "actions" => list(block.get("elements"), 25, button).map_err(under(".elements")),
        other => Err(format!(".type: unsupported block type `{other}`")),
    }
}

/// Prefixes a problem's path with `field`.
fn under(field: &str) -> impl Fn(String) -> String + '_ {
    move |why| format!("{field}{why}")
}

fn section(block: &Value) -> Result<(), String> {
    let (text, fields) = (block.get("text"), block.get("fields"));
    if text.is_none() && fields.is_none() {
        return Err(": neither text nor fields".into());
    }
    if text.is_some() {
        text_object(text, ANY_TEXT, 3000).map_err(under(".text"))?;
    }
    if fields.is_some() {
        let field = |f: &Value| text_object(Some(f), ANY_TEXT, 2000);
        list(fields, 10, field).map_err(under(".fields"))?;
    }
    match block.get("accessory") {
        Some(accessory) if accessory.get("type").and_then(Value::as_str).is_none() => {
            Err(".accessory: an object with a type".into())
        }
        _ => Ok(()),
    }
}

fn context_element(element: &Value) -> Result<(), String> {
    if element.get("type").and_then(Value::as_str) != Some("image") {
        return text_object(Some(element), ANY_TEXT, 3000);
    }
    let missing = ["image_url", "alt_text"]
        .into_iter()
        .find(|f| super::nonempty(element, f).is_none());
    missing.map_or(Ok(()), |f| Err(format!(".{f}: missing or empty")))
}

fn button(element: &Value) -> Result<(), String> {
    if element.get("type").and_then(Value::as_str) != Some("button") {
        return Err(".type: only buttons are supported".into());
    }
    text_object(element.get("text"), PLAIN_TEXT, 75).map_err(under(".text"))?;
    optional_string(element, "url", 3000)?;
    optional_string(element, "action_id", 255)?;
    optional_string(element, "value", 2000)?;
    match element.get("style").map(Value::as_str) {
        None | Some(Some("primary" | "danger")) => Ok(()),
        Some(_) => Err(".style: primary or danger".into()),
    }
}

/// `value` must be a non-empty array of at most `max` items that each pass `each`.
fn list(
    value: Option<&Value>,
    max: usize,
    each: impl Fn(&Value) -> Result<(), String>,
) -> Result<(), String> {
    let items = value.and_then(Value::as_array).ok_or(": not an array")?;
    if items.is_empty() || items.len() > max {
        return Err(format!(": {} items, not 1 to {max}", items.len()));
    }
    let mut checked = items.iter().enumerate();
    checked.try_for_each(|(i, item)| each(item).map_err(|why| format!("[{i}]{why}")))
}

/// A text object: `{"type": one of kinds, "text": 1 to max characters}`.
fn text_object(value: Option<&Value>, kinds: &[&str], max: usize) -> Result<(), String> {
    let value = value
        .filter(|v| v.is_object())
        .ok_or(": not a text object")?;
    let kind = value
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if !kinds.contains(&kind) {
        return Err(format!(".type: `{kind}`, not one of {kinds:?}"));
    }
    let text = value
        .get("text")
        .and_then(Value::as_str)
        .unwrap_or_default();
    within(text, max).map_err(under(".text"))
}

/// `object[key]`, if present, must be a string of 1 to `max` characters.
fn optional_string(object: &Value, key: &str, max: usize) -> Result<(), String> {
    let Some(value) = object.get(key) else {
        return Ok(());
    };
    let value = value
        .as_str()
        .ok_or_else(|| format!(".{key}: not a string"))?;
    within(value, max).map_err(|why| format!(".{key}{why}"))
}

fn within(text: &str, max: usize) -> Result<(), String> {
    match text.chars().count() {
        0 => Err(": empty".into()),
        n if n > max => Err(format!(": longer than {max} characters")),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::testing::*;

    const JSON: Option<&str> = Some("application/json; charset=utf-8");

    fn judge_raw(content_type: Option<&str>, body: &str) -> String {
        let headers: Vec<_> = content_type
            .map(|ct| ("Content-Type", ct))
            .into_iter()
            .collect();
        let req = post(&format!("{PATH_PREFIX}tok"), &headers, body.to_string());
        outcome(judge(&req, &BotConfig::default(), at(0)))
    }

    fn judge_json(body: &Value) -> String {
        judge_raw(JSON, &body.to_string())
    }

    fn blocks_of(blocks: Value) -> String {
        judge_json(&json!({ "blocks": blocks }))
    }

    fn plain(text: &str) -> Value {
        json!({ "type": "plain_text", "text": text })
    }

    #[test]
    fn payload_must_be_a_json_object_sent_as_json() {
        let text = r#"{"text":"job-7 done"}"#;
        let not_json = "HTTP 400: invalid_payload (Content-Type is not application/json)";
        let not_object = "HTTP 400: invalid_payload (not a JSON object)";
        let cases = [
            (JSON, text, "accepted"),
            (Some("text/plain"), text, not_json),
            (None, text, not_json),
            (JSON, "payload=x", not_object),
            (JSON, "[]", not_object),
            (
                JSON,
                r#"{"text":7}"#,
                "HTTP 400: invalid_payload (text is not a string)",
            ),
            (JSON, r#"{"text":""}"#, "HTTP 400: no_text"),
            (JSON, r#"{"blocks":[]}"#, "HTTP 400: no_text"),
            (JSON, r#"{"username":"x"}"#, "HTTP 400: no_text"),
        ];
        for (content_type, body, expected) in cases {
            assert_eq!(
                judge_raw(content_type, body),
                expected,
                "{body} {content_type:?}"
            );
        }
    }

    #[test]
    fn accepts_every_supported_block() {
        let message = json!({ "text": "fallback", "blocks": [
            { "type": "header", "text": plain("job-7 succeeded") },
            { "type": "section", "block_id": "s1", "text": { "type": "mrkdwn", "text": "*done*" },
              "fields": [plain("a"), { "type": "mrkdwn", "text": "b" }],
              "accessory": { "type": "image", "image_url": "https://i", "alt_text": "i" } },
            { "type": "section", "fields": [plain("only fields")] },
            { "type": "divider" },
            { "type": "context", "elements": [
                { "type": "mrkdwn", "text": "ns/ml" },
                { "type": "image", "image_url": "https://i", "alt_text": "logo" } ] },
            { "type": "actions", "elements": [
                { "type": "button", "text": plain("Logs"), "url": "https://logs", "action_id": "logs",
                  "style": "primary", "value": "v" } ] },
        ] });
        assert_eq!(judge_json(&message), "accepted");
        assert_eq!(
            blocks_of(json!([{ "type": "divider" }])),
            "accepted",
            "blocks alone will do"
        );
    }

    #[test]
    fn refuses_invalid_blocks_saying_where() {
        let long = |n: usize| "x".repeat(n);
        let button = |extra: Value| {
            let mut button = json!({ "type": "button", "text": plain("Go") });
            button
                .as_object_mut()
                .expect("an object")
                .extend(extra.as_object().cloned().unwrap_or_default());
            json!([{ "type": "actions", "elements": [button] }])
        };
        let cases = [
            (json!({}), "blocks: not an array"),
            (
                json!(vec![json!({ "type": "divider" }); 51]),
                "blocks: 51 of at most 50",
            ),
            (
                json!([{ "type": "image" }]),
                "blocks[0].type: unsupported block type `image`",
            ),
            (
                json!([{ "text": plain("x") }]),
                "blocks[0].type: unsupported block type ``",
            ),
            (
                json!([{ "type": "divider", "block_id": 5 }]),
                "blocks[0].block_id: not a string",
            ),
            (
                json!([{ "type": "header", "text": plain(&long(151)) }]),
                "blocks[0].text.text: longer than 150 characters",
            ),
            (
                json!([{ "type": "header", "text": { "type": "mrkdwn", "text": "x" } }]),
                r#"blocks[0].text.type: `mrkdwn`, not one of ["plain_text"]"#,
            ),
            (
                json!([{ "type": "header", "text": plain("") }]),
                "blocks[0].text.text: empty",
            ),
            (
                json!([{ "type": "header" }]),
                "blocks[0].text: not a text object",
            ),
            (
                json!([{ "type": "section" }]),
                "blocks[0]: neither text nor fields",
            ),
            (
                json!([{ "type": "section", "text": plain(&long(3001)) }]),
                "blocks[0].text.text: longer than 3000 characters",
            ),
            (
                json!([{ "type": "section", "fields": vec![plain("f"); 11] }]),
                "blocks[0].fields: 11 items, not 1 to 10",
            ),
            (
                json!([{ "type": "section", "fields": [plain(&long(2001))] }]),
                "blocks[0].fields[0].text: longer than 2000 characters",
            ),
            (
                json!([{ "type": "section", "text": plain("x"), "accessory": {} }]),
                "blocks[0].accessory: an object with a type",
            ),
            (
                json!([{ "type": "context", "elements": [] }]),
                "blocks[0].elements: 0 items, not 1 to 10",
            ),
            (
                json!([{ "type": "context", "elements": [{ "type": "image", "image_url": "u" }] }]),
                "blocks[0].elements[0].alt_text: missing or empty",
            ),
            (
                json!([{ "type": "actions", "elements": vec![json!({ "type": "button", "text": plain("b") }); 26] }]),
                "blocks[0].elements: 26 items, not 1 to 25",
            ),
            (
                json!([{ "type": "actions", "elements": [{ "type": "static_select" }] }]),
                "blocks[0].elements[0].type: only buttons are supported",
            ),
            (
                button(json!({ "text": plain(&long(76)) })),
                "blocks[0].elements[0].text.text: longer than 75 characters",
            ),
            (
                button(json!({ "url": long(3001) })),
                "blocks[0].elements[0].url: longer than 3000 characters",
            ),
            (
                button(json!({ "action_id": long(256) })),
                "blocks[0].elements[0].action_id: longer than 255 characters",
            ),
            (
                button(json!({ "style": "default" })),
                "blocks[0].elements[0].style: primary or danger",
            ),
        ];
        for (blocks, why) in cases {
            assert_eq!(
                blocks_of(blocks),
                format!("HTTP 400: invalid_blocks ({why})")
            );
        }
        // Characters, not bytes: 150 three-byte characters fit in a header.
        assert_eq!(
            blocks_of(json!([{ "type": "header", "text": plain(&"训".repeat(150)) }])),
            "accepted"
        );
        assert_eq!(blocks_of(button(json!({ "url": long(3000) }))), "accepted");
    }

    #[test]
    fn fixed_answers_are_slacks() {
        let answers = fixed_answers(contract());
        assert_eq!(
            answers,
            [
                "404 no_service",
                "429 rate_limited (Retry-After: 1)",
                "200 ok"
            ]
        );
    }
}
