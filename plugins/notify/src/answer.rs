//! What a service's answer (or the lack of one) means for the event: delivered, retry, or give
//! up.
//!
//! The split follows one question: could the same request succeed later? Throttling, server
//! errors and network trouble can, so the host retries them (with backoff, keeping the job's
//! order); a bad signature, a refused IP, a malformed body or a destination the host will not
//! connect to cannot, so the event goes to the dead-letter list at once, with a message that
//! says what to fix. Each provider knows its own refusal codes; what every HTTP service shares
//! — the status line and a request that got no answer — is decided here.

use serde_json::Value;

/// How one attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Delivered,
    /// The service said "too many, later": not a failure. The event is deferred (the service's
    /// `Retry-After`, else the provider's own wait), spending no retry attempt, so a long
    /// throttle never dead-letters a message.
    Throttled(String),
    Retry(String),
    GiveUp(String),
}

/// A request that got no HTTP answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    /// The host refused to send it (`HTTP-request-denied`): the destination is not in the
    /// manifest's `grants.http`, or resolves to a private address.
    Denied,
    /// Anything else: DNS, connect, TLS, timeouts, a cut connection.
    Failed(String),
}

/// The seconds a `Retry-After` header asks for (its delay-seconds form; an HTTP date is not
/// read), at least 1 and at most an hour.
pub fn retry_after(value: Option<&str>) -> Option<u32> {
    value?
        .trim()
        .parse::<u32>()
        .ok()
        .map(|seconds| seconds.clamp(1, 3600))
}

/// The outcome of a request that got no answer from `service`.
pub fn no_answer(transport: Transport, service: &str) -> Outcome {
    match transport {
        Transport::Denied => Outcome::GiveUp(
            "the host refused the request: the webhook's origin must be listed in the \
             manifest's grants.http.allow, and one that resolves to a private address needs \
             grants.http.allow_private: true"
                .to_string(),
        ),
        Transport::Failed(reason) => Outcome::Retry(format!("no answer from {service}: {reason}")),
    }
}

/// What the status line alone decides; `None` for a 2xx, whose body decides. `detail` is
/// appended to the message (what the body said).
pub fn by_status(status: u16, detail: &str) -> Option<Outcome> {
    if status == 429 {
        return Some(Outcome::Throttled(format!("HTTP {status}{detail}")));
    }
    if status == 408 || (500..=599).contains(&status) {
        return Some(Outcome::Retry(format!("HTTP {status}{detail}")));
    }
    if !(200..=299).contains(&status) {
        let hint = if status == 404 {
            " (is the webhook token right?)"
        } else {
            ""
        };
        return Some(Outcome::GiveUp(format!("HTTP {status}{detail}{hint}")));
    }
    None
}

/// The `{"errcode": N, "errmsg": "…"}` answer DingTalk and WeCom give, with HTTP 200 for
/// refusals too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrCode {
    pub code: Option<i64>,
    pub msg: Option<String>,
}

impl ErrCode {
    /// Reads the body; anything else than such an object has no code.
    pub fn parse(body: &[u8]) -> ErrCode {
        let value = serde_json::from_slice::<Value>(body).unwrap_or(Value::Null);
        ErrCode {
            code: value.get("errcode").and_then(Value::as_i64),
            msg: value
                .get("errmsg")
                .and_then(Value::as_str)
                .map(|m| m.chars().take(300).collect()),
        }
    }

    /// `: errcode N (msg)` when the body carried a code, else nothing.
    pub fn suffix(&self) -> String {
        match self.code {
            Some(code) => format!(": errcode {code} ({})", self.msg.as_deref().unwrap_or("")),
            None => String::new(),
        }
    }

    /// The outcome of an answer of a service speaking this shape: 0 delivered, a code in
    /// `throttled` throttled, any other code given up with `hint(code)` appended.
    pub fn classify(
        status: u16,
        body: &[u8],
        service: &str,
        throttled: &[i64],
        hint: fn(i64) -> &'static str,
    ) -> Outcome {
        let answer = ErrCode::parse(body);
        if let Some(outcome) = by_status(status, &answer.suffix()) {
            return outcome;
        }
        match answer.code {
            Some(0) => Outcome::Delivered,
            Some(code) if throttled.contains(&code) => {
                Outcome::Throttled(format!("throttled by {service}{}", answer.suffix()))
            }
            Some(code) => Outcome::GiveUp(format!(
                "{service} refused the message{}{}",
                answer.suffix(),
                hint(code)
            )),
            None => Outcome::GiveUp(format!(
                "HTTP {status} without an `errcode` in the answer; is the webhook a {service} \
                 robot URL?"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_hint(_: i64) -> &'static str {
        ""
    }

    fn answer(status: u16, body: &str) -> Outcome {
        ErrCode::classify(status, body.as_bytes(), "Chat", &[130101], no_hint)
    }

    #[test]
    fn statuses() {
        assert_eq!(by_status(200, ""), None);
        assert_eq!(by_status(204, ""), None);
        assert!(matches!(by_status(429, ""), Some(Outcome::Throttled(_))));
        for retried in [408, 500, 502, 503, 599] {
            assert!(
                matches!(by_status(retried, ""), Some(Outcome::Retry(_))),
                "{retried}"
            );
        }
        for given_up in [301, 400, 401, 403, 410] {
            assert!(
                matches!(by_status(given_up, ""), Some(Outcome::GiveUp(_))),
                "{given_up}"
            );
        }
        let Some(Outcome::GiveUp(message)) = by_status(404, ": no_service") else {
            panic!("404 gives up");
        };
        assert!(
            message.contains("no_service") && message.contains("token"),
            "{message}"
        );
    }

    #[test]
    fn errcodes() {
        assert_eq!(
            answer(200, r#"{"errcode":0,"errmsg":"ok"}"#),
            Outcome::Delivered
        );
        let Outcome::Throttled(message) = answer(200, r#"{"errcode":130101,"errmsg":"too fast"}"#)
        else {
            panic!("a throttle code is throttling");
        };
        assert!(
            message.contains("130101") && message.contains("too fast"),
            "{message}"
        );
        let Outcome::GiveUp(message) = answer(200, r#"{"errcode":310000,"errmsg":"sign"}"#) else {
            panic!("a refusal gives up");
        };
        assert!(message.contains("310000"), "{message}");
        assert!(matches!(answer(200, "<html>"), Outcome::GiveUp(_)));
        assert!(matches!(
            answer(503, r#"{"errcode":-1}"#),
            Outcome::Retry(_)
        ));
    }

    #[test]
    fn retry_after_seconds() {
        assert_eq!(retry_after(Some("30")), Some(30));
        assert_eq!(retry_after(Some(" 0 ")), Some(1));
        assert_eq!(retry_after(Some("86400")), Some(3600));
        assert_eq!(retry_after(Some("Wed, 21 Oct 2026 07:28:00 GMT")), None);
        assert_eq!(retry_after(None), None);
    }

    #[test]
    fn transport() {
        assert!(
            matches!(no_answer(Transport::Denied, "Chat"), Outcome::GiveUp(m) if m.contains("grants.http"))
        );
        assert!(matches!(
            no_answer(Transport::Failed("reset".into()), "Chat"),
            Outcome::Retry(m) if m == "no answer from Chat: reset"
        ));
    }
}
