//! The contract of a WeCom (企业微信) group robot: `POST /cgi-bin/webhook/send?key=TOKEN` with a
//! JSON message. Requests are not signed: the key in the URL is the only credential, so a bot's
//! secret is ignored and [`Received::signed`](super::Received::signed) is always false.
//!
//! WeCom answers everything with HTTP 200 and `{"errcode": …, "errmsg": …}`: `0`/`ok` for a
//! delivered message, [`ERR_INVALID_URL`] for an unknown key and [`ERR_FREQ_OUT_OF_LIMIT`] for a
//! throttled request (the real limit: [`PER_MINUTE`] accepted messages per robot in any 60 s).
//! After the shared steps ([`super`]), the body is checked in this order, and the first failure
//! decides:
//!
//! 1. a JSON object whose `msgtype` is `text`, `markdown` or `markdown_v2`, else
//!    [`ERR_INVALID_MSGTYPE`] `invalid message type` (also for a body that is not JSON);
//! 2. the object named by `msgtype` (say `text`), then its `content`, each in turn: absent (or
//!    `null`) or an empty string: [`ERR_EMPTY_CONTENT`] `empty content`; of the wrong type (not
//!    an object, not a string): [`ERR_INVALID_PARAMETER`] `invalid Request Parameter: <what>`;
//! 3. `content` longer than [`MAX_TEXT_BYTES`] (`text`) or [`MAX_MARKDOWN_BYTES`] (`markdown`,
//!    `markdown_v2`) in UTF-8: [`ERR_INVALID_PARAMETER`];
//! 4. (`text` only) `mentioned_list` or `mentioned_mobile_list` present and not an array of
//!    strings: [`ERR_INVALID_PARAMETER`].
//!
//! Knowingly simplified: the other message types (image, news, file, voice, template_card) are
//! refused as unknown; markdown content is not parsed; the error messages are shorter than
//! WeCom's, which append a hint and a link.

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::{Accepted, Answer, BotConfig, Contract, Inbound, Route, Verdict, string_list};

/// Where WeCom serves group robots; the token is the `key` query parameter.
pub const PATH: &str = "/cgi-bin/webhook/send";
/// The longest `text.content`, in bytes.
pub const MAX_TEXT_BYTES: usize = 2048;
/// The longest `markdown.content` and `markdown_v2.content`, in bytes.
pub const MAX_MARKDOWN_BYTES: usize = 4096;
/// Accepted messages allowed per robot in any sixty-second window.
pub const PER_MINUTE: usize = 20;

/// The key names no robot.
pub const ERR_INVALID_URL: i64 = 93_000;
/// Throttled: over [`PER_MINUTE`], or [`throttle_next`](super::ChatReceiver::throttle_next).
pub const ERR_FREQ_OUT_OF_LIMIT: i64 = 45_009;
/// No `msgtype`, or one this stand-in does not know.
pub const ERR_INVALID_MSGTYPE: i64 = 40_008;
/// The message has no content.
pub const ERR_EMPTY_CONTENT: i64 = 44_004;
/// A field of the wrong type, or content too long.
pub const ERR_INVALID_PARAMETER: i64 = 40_058;

pub(super) fn contract() -> Contract {
    let route = Route::Query {
        path: PATH,
        param: "key",
    };
    let unknown = Answer::errcode(ERR_INVALID_URL, "invalid webhook url");
    let throttled = Answer::errcode(ERR_FREQ_OUT_OF_LIMIT, "api freq out of limit");
    Contract::with_errcodes(route, [unknown, throttled], PER_MINUTE, judge)
}

/// Checks 1 to 4 of the [module docs](self).
fn judge(req: &Inbound, _bot: &BotConfig, _now: DateTime<Utc>) -> Verdict {
    let message: Value = serde_json::from_slice(&req.body).unwrap_or_default();
    let msgtype = message.get("msgtype").and_then(Value::as_str);
    let max_bytes = match msgtype {
        Some("text") => MAX_TEXT_BYTES,
        Some("markdown" | "markdown_v2") => MAX_MARKDOWN_BYTES,
        _ => return Err(Answer::errcode(ERR_INVALID_MSGTYPE, "invalid message type")),
    };
    let msgtype = msgtype.unwrap_or_default();
    let invalid = |what: String| {
        let message = format!("invalid Request Parameter: {what}");
        Answer::errcode(ERR_INVALID_PARAMETER, message)
    };
    let present = |v: &&Value| !v.is_null() && v.as_str() != Some("");
    let empty = || Answer::errcode(ERR_EMPTY_CONTENT, "empty content");
    let object = message.get(msgtype).filter(present).ok_or_else(empty)?;
    if !object.is_object() {
        return Err(invalid(format!("{msgtype} is not an object")));
    }
    let content = object.get("content").filter(present).ok_or_else(empty)?;
    let Some(content) = content.as_str() else {
        return Err(invalid(format!("{msgtype}.content is not a string")));
    };
    if content.len() > max_bytes {
        return Err(invalid(format!(
            "{msgtype}.content exceed max length {max_bytes}"
        )));
    }
    let lists = ["mentioned_list", "mentioned_mobile_list"];
    let mentions = Some(object).filter(|_| msgtype == "text");
    if let Some(list) = lists
        .iter()
        .find(|l| !string_list(mentions.and_then(|o| o.get(l))))
    {
        return Err(invalid(format!("text.{list} is not an array of strings")));
    }
    Ok(Accepted {
        body: message,
        signed: false,
    })
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    fn judge_body(body: &[u8]) -> String {
        let secret = Some("ignored".to_string());
        let bot = BotConfig {
            secret,
            keyword: None,
        };
        outcome(judge(
            &post("/cgi-bin/webhook/send?key=k", &[], body.to_vec()),
            &bot,
            at(0),
        ))
    }

    fn judge_json(body: Value) -> String {
        judge_body(body.to_string().as_bytes())
    }

    fn of(msgtype: &str, content: Value) -> Value {
        json!({ "msgtype": msgtype, msgtype: { "content": content } })
    }

    #[test]
    fn accepts_text_and_both_markdowns_unsigned() {
        let mut text = of("text", json!("job-7 failed"));
        text["text"]["mentioned_list"] = json!(["wang", "@all"]);
        text["text"]["mentioned_mobile_list"] = json!(["13800001111"]);
        let cases = [
            text,
            of("markdown", json!("# job-7")),
            of("markdown_v2", json!("**job-7**")),
        ];
        for body in cases {
            assert_eq!(judge_json(body.clone()), "accepted", "{body}");
        }
    }

    #[test]
    fn refuses_unknown_types_empty_content_and_bad_fields() {
        let invalid = |what: &str| format!("errcode 40058: invalid Request Parameter: {what}");
        let (bad_type, empty) = (
            "errcode 40008: invalid message type",
            "errcode 44004: empty content",
        );
        let mut mentions = of("text", json!("hi"));
        mentions["text"]["mentioned_mobile_list"] = json!([138]);
        let cases = [
            (json!({ "text": { "content": "hi" } }), bad_type.to_string()),
            (of("image", json!("hi")), bad_type.into()),
            (json!({ "msgtype": 1 }), bad_type.into()),
            (json!({ "msgtype": "text" }), empty.into()),
            (json!({ "msgtype": "text", "text": {} }), empty.into()),
            (of("markdown", json!("")), empty.into()),
            (
                json!({ "msgtype": "markdown", "markdown": "hi" }),
                invalid("markdown is not an object"),
            ),
            (
                of("text", json!(7)),
                invalid("text.content is not a string"),
            ),
            (
                mentions,
                invalid("text.mentioned_mobile_list is not an array of strings"),
            ),
        ];
        for (body, expected) in cases {
            assert_eq!(judge_json(body.clone()), expected, "{body}");
        }
        assert_eq!(judge_body(b"msgtype=text"), bad_type, "not JSON");
    }

    #[test]
    fn content_limits_are_in_utf8_bytes() {
        // 682 three-byte characters are 2046 bytes; one more is over 2048.
        let han = "训".repeat(682);
        assert_eq!(judge_json(of("text", json!(han))), "accepted");
        let over = format!("{han}训");
        let too_long =
            "errcode 40058: invalid Request Parameter: text.content exceed max length 2048";
        assert_eq!(judge_json(of("text", json!(over))), too_long);
        for markdown in ["markdown", "markdown_v2"] {
            let fits = of(markdown, json!("m".repeat(MAX_MARKDOWN_BYTES)));
            assert_eq!(judge_json(fits), "accepted");
            let over = of(markdown, json!("m".repeat(MAX_MARKDOWN_BYTES + 1)));
            assert!(
                judge_json(over).ends_with("content exceed max length 4096"),
                "{markdown}"
            );
        }
    }

    #[test]
    fn fixed_answers_are_wecoms() {
        let expected = [
            r#"200 {"errcode":93000,"errmsg":"invalid webhook url"}"#,
            r#"200 {"errcode":45009,"errmsg":"api freq out of limit"}"#,
            r#"200 {"errcode":0,"errmsg":"ok"}"#,
        ];
        assert_eq!(fixed_answers(contract()), expected);
    }
}
