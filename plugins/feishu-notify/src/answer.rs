//! What Feishu's answer means for the event: delivered, retry, or give up.
//!
//! Feishu reports most refusals as HTTP 200 with a non-zero `code` in the body (older answers
//! carry it as `StatusCode`), so the body is always read. Throttling (code 11232) is deferred; a
//! bad signature, a missing keyword, a refused IP or a malformed body gives up at once, with a
//! message that says what to fix. The status line and requests without an answer are decided as
//! for every notifier, by the core's `answer` module.

use jobrelay_notify::answer::{Outcome, by_status};
use serde_json::Value;

/// Feishu: throttled (5 per second, 100 per minute per bot).
pub const CODE_FREQUENCY_LIMITED: i64 = 11232;
/// Feishu: malformed body or body over 20 KB.
pub const CODE_BAD_REQUEST: i64 = 9499;
/// Feishu: wrong signature or timestamp more than an hour off.
pub const CODE_SIGN_MISMATCH: i64 = 19021;
/// Feishu: the sender's IP is not on the bot's allowlist.
pub const CODE_IP_NOT_ALLOWED: i64 = 19022;
/// Feishu: none of the bot's keywords is in the message.
pub const CODE_KEYWORD_NOT_FOUND: i64 = 19024;

/// Classifies Feishu's answer; messages do not contain the webhook (the core prefixes the
/// redacted URL and scrubs the text).
pub fn classify(status: u16, body: &[u8]) -> Outcome {
    let feishu = FeishuAnswer::parse(body);
    if let Some(outcome) = by_status(status, &feishu.describe_suffix()) {
        return outcome;
    }
    match feishu.code {
        Some(0) => Outcome::Delivered,
        Some(CODE_FREQUENCY_LIMITED) => Outcome::Throttled(format!(
            "throttled by Feishu: code {CODE_FREQUENCY_LIMITED} ({})",
            feishu.msg_or("frequency limited")
        )),
        Some(code) => Outcome::GiveUp(format!(
            "Feishu refused the message: code {code} ({}){}",
            feishu.msg_or("no message"),
            hint(code)
        )),
        None => Outcome::GiveUp(format!(
            "HTTP {status} without a Feishu `code` in the answer; is the webhook a Feishu bot URL?"
        )),
    }
}

/// What to check for each permanent refusal.
fn hint(code: i64) -> &'static str {
    match code {
        CODE_SIGN_MISMATCH => {
            ": check `secret` against the bot's signature setting, and the host clock"
        }
        CODE_IP_NOT_ALLOWED => {
            ": the bot's IP allowlist does not include jobrelay's egress address"
        }
        CODE_KEYWORD_NOT_FOUND => {
            ": the bot requires a keyword; put it in `title` so every card carries it"
        }
        CODE_BAD_REQUEST => ": the body was malformed or over 20 KB",
        _ => "",
    }
}

/// The parts of a Feishu answer body that matter.
struct FeishuAnswer {
    code: Option<i64>,
    msg: Option<String>,
}

impl FeishuAnswer {
    fn parse(body: &[u8]) -> FeishuAnswer {
        let Ok(value) = serde_json::from_slice::<Value>(body) else {
            return FeishuAnswer {
                code: None,
                msg: None,
            };
        };
        let code = value
            .get("code")
            .and_then(Value::as_i64)
            .or_else(|| value.get("StatusCode").and_then(Value::as_i64));
        let msg = value
            .get("msg")
            .and_then(Value::as_str)
            .or_else(|| value.get("StatusMessage").and_then(Value::as_str))
            .map(|m| m.chars().take(300).collect());
        FeishuAnswer { code, msg }
    }

    fn msg_or<'a>(&'a self, fallback: &'a str) -> &'a str {
        self.msg
            .as_deref()
            .filter(|m| !m.is_empty())
            .unwrap_or(fallback)
    }

    /// `: code N (msg)` when the body was a Feishu answer, else nothing.
    fn describe_suffix(&self) -> String {
        match self.code {
            Some(code) => format!(": code {code} ({})", self.msg_or("no message")),
            None => String::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, body: &str) -> Outcome {
        classify(status, body.as_bytes())
    }

    fn give_up(outcome: Outcome) -> String {
        match outcome {
            Outcome::GiveUp(message) => message,
            other => panic!("expected give-up, got {other:?}"),
        }
    }

    fn retry(outcome: Outcome) -> String {
        match outcome {
            Outcome::Retry(message) => message,
            other => panic!("expected retry, got {other:?}"),
        }
    }

    #[test]
    fn success_in_both_shapes() {
        assert_eq!(
            answer(
                200,
                r#"{"StatusCode":0,"StatusMessage":"success","code":0,"data":{},"msg":"success"}"#
            ),
            Outcome::Delivered
        );
        assert_eq!(
            answer(200, r#"{"StatusCode":0,"StatusMessage":"success"}"#),
            Outcome::Delivered
        );
    }

    #[test]
    fn throttling_is_throttled_not_failed() {
        let Outcome::Throttled(message) =
            answer(200, r#"{"code":11232,"msg":"frequency limited","data":{}}"#)
        else {
            panic!("11232 is throttling");
        };
        assert!(message.contains("11232"), "{message}");
        assert!(matches!(answer(429, ""), Outcome::Throttled(_)));
    }

    #[test]
    fn server_errors_are_retried() {
        for status in [500, 502, 503, 504] {
            let message = retry(answer(status, "upstream timeout"));
            assert!(message.contains(&status.to_string()), "{message}");
        }
    }

    #[test]
    fn refusals_give_up_with_code_and_msg() {
        for (code, msg, hint) in [
            (
                19021,
                "sign match fail or timestamp is not within one hour",
                "`secret`",
            ),
            (19022, "ip not allowed", "allowlist"),
            (19024, "Key Words Not Found", "keyword"),
            (9499, "Bad Request", "20 KB"),
            (12345, "something new", ""),
        ] {
            let body = format!(r#"{{"code":{code},"msg":"{msg}","data":{{}}}}"#);
            let message = give_up(answer(200, &body));
            assert!(message.contains(&code.to_string()), "{message}");
            assert!(message.contains(msg), "{message}");
            assert!(message.contains(hint), "{message}");
        }
        let legacy = give_up(answer(
            200,
            r#"{"StatusCode":19021,"StatusMessage":"sign fail"}"#,
        ));
        assert!(
            legacy.contains("19021") && legacy.contains("sign fail"),
            "{legacy}"
        );
    }

    #[test]
    fn client_errors_give_up() {
        let message = give_up(answer(
            404,
            r#"{"code":19001,"msg":"param invalid: incoming webhook access token invalid","data":{}}"#,
        ));
        assert!(
            message.contains("404") && message.contains("19001"),
            "{message}"
        );
        assert!(message.contains("token"), "{message}");
        give_up(answer(400, "bad"));
        give_up(answer(403, ""));
        give_up(answer(301, ""));
    }

    #[test]
    fn a_200_that_is_not_feishu_gives_up() {
        let message = give_up(answer(200, "<html>portal</html>"));
        assert!(message.contains("without a Feishu `code`"), "{message}");
    }
}
