//! The contract of a DingTalk (钉钉) custom robot, as documented in "自定义机器人发送群消息"
//! (open.dingtalk.com): `POST /robot/send?access_token=TOKEN` with a JSON message.
//!
//! DingTalk answers everything with HTTP 200 and `{"errcode": …, "errmsg": …}`: `0`/`ok` for a
//! delivered message, [`ERR_TOKEN_NOT_EXIST`] for an unknown token and [`ERR_SEND_TOO_FAST`]
//! for a throttled request (the real limit: [`PER_MINUTE`] accepted messages per robot in any
//! 60 s). After the shared steps ([`super`]), the checks run in this order and the first that
//! fails decides:
//!
//! 1. with a secret: the query must carry `timestamp` (milliseconds since the epoch, within
//!    [`MAX_CLOCK_SKEW_MS`] of now) and `sign`, the URL-encoded [`sign`] of it, else
//!    [`ERR_SIGN_NOT_MATCH`] `sign not match, more: […]`. The query is form-decoded, so a
//!    signature sent without URL-encoding loses its `+` signs and does not match, as at DingTalk;
//! 2. with a [keyword](super::ChatReceiver::set_keyword): it must occur in one of the strings of
//!    the message, else [`ERR_SIGN_NOT_MATCH`] `keywords not in content`;
//! 3. the body must be a JSON object whose `msgtype` is `text`, `markdown`, `actionCard`, `link`
//!    or `feedCard` with the matching object: `text{content}`, `markdown{title, text}`,
//!    `link{title, text, messageUrl}`, `actionCard{title, text}` with `singleTitle` and
//!    `singleURL` or a non-empty `btns` of `{title, actionURL}`, `feedCard{links}` non-empty of
//!    `{title, messageURL, picURL}` (every named field a non-empty string); `at`, if present, an
//!    object with optional `atMobiles` and `atUserIds` (arrays of strings) and `isAtAll` (a
//!    boolean). Else [`ERR_BAD_FIELD`] `missing or bad field: <which>`;
//! 4. a body over [`MAX_BODY_BYTES`]: [`ERR_TOO_LONG`] `message too long`.
//!
//! Knowingly simplified: a robot has one keyword, not DingTalk's up to ten, and it is looked
//! for in every string of the message (`at` lists and URLs included), not only in the text
//! DingTalk shows; a body that is not JSON skips the keyword check (it has no text to search)
//! and is refused by check 3; fields DingTalk ignores are ignored, and optional ones (`picUrl`,
//! `btnOrientation`) are not type-checked.

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::{Accepted, Answer, BotConfig, Contract, Inbound, Route, Verdict};
use super::{nonempty, string_list, strings};

/// Where DingTalk serves custom robots; the token is the `access_token` query parameter.
pub const PATH: &str = "/robot/send";
/// The largest body DingTalk accepts.
pub const MAX_BODY_BYTES: usize = 20_000;
/// How far a signed request's timestamp may be from the receiver's clock, either way.
pub const MAX_CLOCK_SKEW_MS: i64 = 60 * 60 * 1000;
/// Accepted messages allowed per robot in any sixty-second window.
pub const PER_MINUTE: usize = 20;

/// The token names no robot.
pub const ERR_TOKEN_NOT_EXIST: i64 = 300_001;
/// Throttled: over [`PER_MINUTE`], or [`throttle_next`](super::ChatReceiver::throttle_next).
pub const ERR_SEND_TOO_FAST: i64 = 130_101;
/// A missing or wrong signature, a stale timestamp, or a message without the keyword.
pub const ERR_SIGN_NOT_MATCH: i64 = 310_000;
/// A malformed message.
pub const ERR_BAD_FIELD: i64 = 40_035;
/// A body over [`MAX_BODY_BYTES`].
pub const ERR_TOO_LONG: i64 = 460_101;

const SIGN_NOT_MATCH: &str =
    "sign not match, more: [https://ding-doc.dingtalk.com/doc#/serverapi2/qf2nxq]";

/// DingTalk's signature: Base64 of HMAC-SHA256 keyed with `secret` over
/// `"{timestamp_ms}\n{secret}"`. Not URL-encoded: a client must encode it into the query.
pub fn sign(timestamp_ms: i64, secret: &str) -> String {
    sign_text(&timestamp_ms.to_string(), secret)
}

/// [`sign`] over the timestamp exactly as the client wrote it.
fn sign_text(timestamp: &str, secret: &str) -> String {
    let secret = secret.as_bytes();
    super::hmac_base64(secret, &[timestamp.as_bytes(), b"\n", secret])
}

pub(super) fn contract() -> Contract {
    let route = Route::Query {
        path: PATH,
        param: "access_token",
    };
    let too_fast = format!("send too fast, exceed {PER_MINUTE} times per minute");
    let answers = [
        Answer::errcode(ERR_TOKEN_NOT_EXIST, "token is not exist"),
        Answer::errcode(ERR_SEND_TOO_FAST, too_fast),
    ];
    Contract::with_errcodes(route, answers, PER_MINUTE, judge)
}

/// Checks 1 to 4 of the [module docs](self).
fn judge(req: &Inbound, bot: &BotConfig, now: DateTime<Utc>) -> Verdict {
    let signed = bot.verify(|secret| {
        let valid = signature_valid(req, secret, now);
        valid
            .then_some(())
            .ok_or_else(|| Answer::errcode(ERR_SIGN_NOT_MATCH, SIGN_NOT_MATCH))
    })?;
    let message: Option<Value> = serde_json::from_slice(&req.body).ok();
    if let (Some(keyword), Some(message)) = (&bot.keyword, &message)
        && !strings(message)
            .iter()
            .any(|s| s.contains(keyword.as_str()))
    {
        return Err(Answer::errcode(
            ERR_SIGN_NOT_MATCH,
            "keywords not in content",
        ));
    }
    let bad_field =
        |which: String| Answer::errcode(ERR_BAD_FIELD, format!("missing or bad field: {which}"));
    let message = message.ok_or_else(|| bad_field("body (not JSON)".into()))?;
    validate(&message).map_err(bad_field)?;
    if req.body.len() > MAX_BODY_BYTES {
        return Err(Answer::errcode(ERR_TOO_LONG, "message too long"));
    }
    Ok(Accepted {
        body: message,
        signed,
    })
}

/// Whether the query carries a fresh `timestamp` and the matching `sign` for `secret`.
fn signature_valid(req: &Inbound, secret: &str, now: DateTime<Utc>) -> bool {
    let (Some(timestamp), Some(sign)) = (req.query("timestamp"), req.query("sign")) else {
        return false;
    };
    let skew = MAX_CLOCK_SKEW_MS.unsigned_abs();
    let fresh = timestamp
        .parse::<i64>()
        .is_ok_and(|ms| ms.abs_diff(now.timestamp_millis()) <= skew);
    fresh && sign == sign_text(&timestamp, secret)
}

/// Check 3: `Err` names the first missing or bad field.
fn validate(message: &Value) -> Result<(), String> {
    if !message.is_object() {
        return Err("body (not a JSON object)".into());
    }
    let msgtype = message.get("msgtype").and_then(Value::as_str);
    let required: &[&str] = match msgtype {
        Some("text") => &["content"],
        Some("markdown") => &["title", "text"],
        Some("link") => &["title", "text", "messageUrl"],
        Some("actionCard") => &["title", "text"],
        Some("feedCard") => &[],
        _ => return Err("msgtype".into()),
    };
    let msgtype = msgtype.unwrap_or_default();
    let object = message
        .get(msgtype)
        .filter(|o| o.is_object())
        .ok_or_else(|| msgtype.to_string())?;
    if let Some(field) = required.iter().find(|f| nonempty(object, f).is_none()) {
        return Err(format!("{msgtype}.{field}"));
    }
    match msgtype {
        "actionCard" => action_card(object),
        "feedCard" => each_with(object, "feedCard.links", &["title", "messageURL", "picURL"]),
        _ => Ok(()),
    }?;
    mentions(message.get("at"))
}

/// An action card has one button (`singleTitle` and `singleURL`) or a list of them (`btns`).
fn action_card(card: &Value) -> Result<(), String> {
    let single = ["singleTitle", "singleURL"];
    if single.iter().all(|f| nonempty(card, f).is_some()) {
        return Ok(());
    }
    if card.get("btns").is_none() {
        return Err("actionCard.singleTitle/singleURL or actionCard.btns".into());
    }
    each_with(card, "actionCard.btns", &["title", "actionURL"])
}

/// `object[path's last part]` must be a non-empty array of objects that each have the
/// `fields` as non-empty strings.
fn each_with(object: &Value, path: &str, fields: &[&str]) -> Result<(), String> {
    let key = path.rsplit('.').next().unwrap_or(path);
    let items = object.get(key).and_then(Value::as_array);
    let items = items.filter(|items| !items.is_empty()).ok_or(path)?;
    for (i, item) in items.iter().enumerate() {
        if let Some(field) = fields.iter().find(|f| nonempty(item, f).is_none()) {
            return Err(format!("{path}[{i}].{field}"));
        }
    }
    Ok(())
}

/// The optional `at`: whom to mention.
fn mentions(at: Option<&Value>) -> Result<(), String> {
    let Some(at) = at else { return Ok(()) };
    if !at.is_object() {
        return Err("at".into());
    }
    if let Some(list) = ["atMobiles", "atUserIds"]
        .into_iter()
        .find(|list| !string_list(at.get(list)))
    {
        return Err(format!("at.{list}"));
    }
    match at.get("isAtAll") {
        None | Some(Value::Bool(_)) => Ok(()),
        Some(_) => Err("at.isAtAll".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    const SECRET: &str = "SEC0123456789abcdef";
    /// 2023-11-14T22:13:20Z, in milliseconds.
    const NOW_MS: i64 = 1_700_000_000_000;
    const SIGN_NOT_MATCH_LINE: &str = "errcode 310000: sign not match, more: [https://ding-doc.dingtalk.com/doc#/serverapi2/qf2nxq]";

    fn judge_at(query: &str, bot: &BotConfig, body: &Value) -> String {
        let req = post(
            &format!("{PATH}?access_token=t{query}"),
            &[],
            body.to_string(),
        );
        outcome(judge(&req, bot, at(NOW_MS / 1000)))
    }

    fn text(content: &str) -> Value {
        json!({ "msgtype": "text", "text": { "content": content } })
    }

    fn bot(secret: Option<&str>, keyword: Option<&str>) -> BotConfig {
        let secret = secret.map(str::to_string);
        let keyword = keyword.map(str::to_string);
        BotConfig { secret, keyword }
    }

    #[test]
    fn sign_matches_vectors_computed_outside_rust() {
        // python3: base64.b64encode(hmac.new(secret, f"{ts}\n{secret}", sha256).digest())
        assert_eq!(
            sign(NOW_MS, SECRET),
            "TSZbRFUuvaSQaRKUpF970OPCb2/LcQAP3wOvwZIzBZk="
        );
        assert_eq!(
            sign(NOW_MS + 1, SECRET),
            "h9I8htdbvJCasKF0f8Gu+a2Cr5fjl9T+pzb6hx3n+pE="
        );
    }

    #[test]
    fn signatures_are_checked_url_decoded_and_fresh() {
        let signed = bot(Some(SECRET), None);
        let cases = [
            // The vector above with `+` signs, URL-encoded as it must be: accepted.
            (
                "&timestamp=1700000000001&sign=h9I8htdbvJCasKF0f8Gu%2Ba2Cr5fjl9T%2Bpzb6hx3n%2BpE%3D",
                "accepted, signed",
            ),
            // Not URL-encoded: the `+` become spaces and the signature no longer matches.
            (
                "&timestamp=1700000000001&sign=h9I8htdbvJCasKF0f8Gu+a2Cr5fjl9T+pzb6hx3n+pE=",
                SIGN_NOT_MATCH_LINE,
            ),
            (
                "&timestamp=1700000000000&sign=TSZbRFUuvaSQaRKUpF970OPCb2%2FLcQAP3wOvwZIzBZk%3D",
                "accepted, signed",
            ),
            ("&timestamp=1700000000000", SIGN_NOT_MATCH_LINE),
            (
                "&sign=TSZbRFUuvaSQaRKUpF970OPCb2%2FLcQAP3wOvwZIzBZk%3D",
                SIGN_NOT_MATCH_LINE,
            ),
            (
                "&timestamp=1700000000002&sign=TSZbRFUuvaSQaRKUpF970OPCb2%2FLcQAP3wOvwZIzBZk%3D",
                SIGN_NOT_MATCH_LINE,
            ),
            ("", SIGN_NOT_MATCH_LINE),
        ];
        for (query, expected) in cases {
            assert_eq!(judge_at(query, &signed, &text("hi")), expected, "{query}");
        }
        // A bot without a secret ignores signatures: accepted, not signed.
        assert_eq!(
            judge_at(cases[0].0, &bot(None, None), &text("hi")),
            "accepted"
        );
    }

    #[test]
    fn timestamps_may_be_an_hour_away_and_no_more() {
        let signed = bot(Some(SECRET), None);
        for (offset_ms, expected) in [
            (-MAX_CLOCK_SKEW_MS, "accepted, signed"),
            (MAX_CLOCK_SKEW_MS, "accepted, signed"),
            (-MAX_CLOCK_SKEW_MS - 1, SIGN_NOT_MATCH_LINE),
            (MAX_CLOCK_SKEW_MS + 1, SIGN_NOT_MATCH_LINE),
        ] {
            let ts = NOW_MS + offset_ms;
            let sign: String =
                form_urlencoded::byte_serialize(sign(ts, SECRET).as_bytes()).collect();
            let query = format!("&timestamp={ts}&sign={sign}");
            assert_eq!(
                judge_at(&query, &signed, &text("hi")),
                expected,
                "{offset_ms}"
            );
        }
    }

    #[test]
    fn keyword_must_be_in_the_message() {
        let guarded = bot(None, Some("训练"));
        let missing = "errcode 310000: keywords not in content";
        assert_eq!(judge_at("", &guarded, &text("job done")), missing);
        assert_eq!(judge_at("", &guarded, &text("训练 done")), "accepted");
        // The keyword check comes before the body check: a bad message without it...
        assert_eq!(
            judge_at("", &guarded, &json!({ "msgtype": "nope" })),
            missing
        );
        // ...and a signature check before both.
        let both = bot(Some(SECRET), Some("训练"));
        assert_eq!(judge_at("", &both, &text("job done")), SIGN_NOT_MATCH_LINE);
    }

    #[test]
    fn messages_of_every_type_are_validated() {
        let plain = bot(None, None);
        let bad = |which: &str| format!("errcode 40035: missing or bad field: {which}");
        let btn = json!({ "title": "Logs", "actionURL": "https://logs" });
        let link = json!({ "title": "t", "messageURL": "https://m", "picURL": "https://p" });
        let cases = [
            (text("hi"), "accepted".to_string()),
            (text(""), bad("text.content")),
            (json!({ "msgtype": "text" }), bad("text")),
            (json!({ "text": { "content": "hi" } }), bad("msgtype")),
            (json!({ "msgtype": "image", "image": {} }), bad("msgtype")),
            (json!(["text"]), bad("body (not a JSON object)")),
            (
                json!({ "msgtype": "markdown", "markdown": { "title": "t", "text": "**x**" } }),
                "accepted".into(),
            ),
            (
                json!({ "msgtype": "markdown", "markdown": { "text": "**x**" } }),
                bad("markdown.title"),
            ),
            (
                json!({ "msgtype": "markdown", "markdown": { "title": "t", "text": 3 } }),
                bad("markdown.text"),
            ),
            (
                json!({ "msgtype": "link", "link": { "title": "t", "text": "x", "messageUrl": "https://m" } }),
                "accepted".into(),
            ),
            (
                json!({ "msgtype": "link", "link": { "title": "t", "text": "x" } }),
                bad("link.messageUrl"),
            ),
            (
                json!({ "msgtype": "actionCard", "actionCard": { "title": "t", "text": "x", "singleTitle": "Open", "singleURL": "https://u" } }),
                "accepted".into(),
            ),
            (
                json!({ "msgtype": "actionCard", "actionCard": { "title": "t", "text": "x", "btns": [btn] } }),
                "accepted".into(),
            ),
            (
                json!({ "msgtype": "actionCard", "actionCard": { "title": "t", "text": "x", "singleTitle": "Open" } }),
                bad("actionCard.singleTitle/singleURL or actionCard.btns"),
            ),
            (
                json!({ "msgtype": "actionCard", "actionCard": { "title": "t", "text": "x", "btns": [] } }),
                bad("actionCard.btns"),
            ),
            (
                json!({ "msgtype": "actionCard", "actionCard": { "title": "t", "text": "x", "btns": [btn, { "title": "x" }] } }),
                bad("actionCard.btns[1].actionURL"),
            ),
            (
                json!({ "msgtype": "feedCard", "feedCard": { "links": [link] } }),
                "accepted".into(),
            ),
            (
                json!({ "msgtype": "feedCard", "feedCard": { "links": [{ "title": "t" }] } }),
                bad("feedCard.links[0].messageURL"),
            ),
        ];
        for (body, expected) in cases {
            assert_eq!(judge_at("", &plain, &body), expected, "{body}");
        }
        let not_json = post(&format!("{PATH}?access_token=t"), &[], "hi");
        assert_eq!(
            outcome(judge(&not_json, &plain, at(0))),
            bad("body (not JSON)")
        );
    }

    #[test]
    fn mentions_are_lists_of_strings_and_a_flag() {
        let plain = bot(None, None);
        let with_at = |at: Value| {
            let mut message = text("hi");
            message["at"] = at;
            judge_at("", &plain, &message)
        };
        let accepted = json!({ "atMobiles": ["138"], "atUserIds": ["u1"], "isAtAll": false });
        assert_eq!(with_at(accepted), "accepted");
        for (at, which) in [
            (json!("138"), "at"),
            (json!({ "atMobiles": [138] }), "at.atMobiles"),
            (json!({ "atUserIds": "u1" }), "at.atUserIds"),
            (json!({ "isAtAll": "true" }), "at.isAtAll"),
        ] {
            assert_eq!(
                with_at(at),
                format!("errcode 40035: missing or bad field: {which}")
            );
        }
    }

    #[test]
    fn bodies_over_20000_bytes_are_too_long() {
        let plain = bot(None, None);
        let skeleton = text("").to_string().len();
        let fits = text(&"y".repeat(MAX_BODY_BYTES - skeleton));
        assert_eq!(judge_at("", &plain, &fits), "accepted");
        let over = text(&"y".repeat(MAX_BODY_BYTES - skeleton + 1));
        assert_eq!(
            judge_at("", &plain, &over),
            "errcode 460101: message too long"
        );
    }

    #[test]
    fn fixed_answers_are_dingtalks() {
        let too_fast =
            r#"200 {"errcode":130101,"errmsg":"send too fast, exceed 20 times per minute"}"#;
        assert_eq!(
            fixed_answers(contract()),
            [
                r#"200 {"errcode":300001,"errmsg":"token is not exist"}"#,
                too_fast,
                r#"200 {"errcode":0,"errmsg":"ok"}"#,
            ]
        );
    }
}
