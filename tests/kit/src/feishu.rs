//! A stand-in for a Feishu (Lark) custom-bot webhook, for end-to-end tests of notifier plugins.
//!
//! The real service cannot be reached where the tests run, and a notifier is only trustworthy if
//! it was exercised against the service's actual quirks: Feishu answers almost every refusal
//! with HTTP 200 and a non-zero `code` in the body, signs with an HMAC whose *key* is the
//! timestamp and secret and whose message is empty, and throttles each bot at 5 requests per
//! second and 100 per minute. [`FeishuReceiver`] reproduces that contract over real HTTP on
//! `127.0.0.1`, records what it accepted, and lets a test inject throttling and server errors.
//!
//! Checks run in the order Feishu applies them, and the first that fails decides the answer:
//!
//! 1. unknown token: HTTP 404, code [`CODE_TOKEN_INVALID`];
//! 2. injected faults ([`FeishuReceiver::fail_next`], then [`FeishuReceiver::throttle_next`]);
//! 3. body over [`MAX_BODY_BYTES`], not JSON, or without a string `msg_type`:
//!    [`CODE_BAD_REQUEST`];
//! 4. with a secret: `timestamp` (a string of unix seconds) within [`MAX_CLOCK_SKEW_SECS`] of
//!    now and `sign` equal to [`sign`] of it, else [`CODE_SIGN_MISMATCH`];
//! 5. with a keyword: the message (the body without `timestamp` and `sign`) must contain it,
//!    else [`CODE_KEYWORD_NOT_FOUND`];
//! 6. the rate limit: more than 5 accepted messages in any second or 100 in any minute:
//!    [`CODE_FREQUENCY_LIMITED`].
//!
//! Knowingly simplified: only accepted messages count towards the rate limit (a refused request
//! never delivered anything, so it cannot have used the bot's quota); a `timestamp` sent as a
//! JSON number is refused like a missing one, since Feishu documents it as a string; the
//! message content is not validated beyond `msg_type`.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use hmac::{Hmac, Mac};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use parking_lot::{Mutex, MutexGuard};
use serde_json::{Value, json};
use sha2::Sha256;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// Where Feishu serves custom bots; the token follows.
pub const HOOK_PATH: &str = "/open-apis/bot/v2/hook/";
/// The largest body Feishu accepts: 20 KB.
pub const MAX_BODY_BYTES: usize = 20 * 1024;
/// How far a signed request's timestamp may be from the receiver's clock, either way.
pub const MAX_CLOCK_SKEW_SECS: i64 = 3600;
/// Accepted messages allowed per bot in any one-second window.
pub const MAX_PER_SECOND: usize = 5;
/// Accepted messages allowed per bot in any sixty-second window.
pub const MAX_PER_MINUTE: usize = 100;

/// The message was delivered.
pub const CODE_SUCCESS: i64 = 0;
/// Malformed body: too large, not JSON, or no `msg_type`.
pub const CODE_BAD_REQUEST: i64 = 9499;
/// Throttled; the sender should try again later.
pub const CODE_FREQUENCY_LIMITED: i64 = 11232;
/// The webhook token names no bot.
pub const CODE_TOKEN_INVALID: i64 = 19001;
/// Wrong signature, or a timestamp more than an hour away.
pub const CODE_SIGN_MISMATCH: i64 = 19021;
/// The bot's keyword is not in the message.
pub const CODE_KEYWORD_NOT_FOUND: i64 = 19024;

/// A body larger than this is not even read to the end; it is refused as too large anyway.
const READ_LIMIT: usize = 1024 * 1024;

/// Feishu's custom-bot signature: Base64 of HMAC-SHA256 keyed with `timestamp + "\n" + secret`
/// over an empty message.
///
/// Exported so tests can sign requests themselves and cross-check a plugin's own implementation.
pub fn sign(timestamp: i64, secret: &str) -> String {
    sign_text(&timestamp.to_string(), secret)
}

/// [`sign`] over the timestamp exactly as the client wrote it, which is what the key is built
/// from on the receiving side.
fn sign_text(timestamp: &str, secret: &str) -> String {
    let key = format!("{timestamp}\n{secret}");
    // HMAC takes keys of any length, so this cannot fail; fall back to an impossible signature
    // rather than panic if it ever did.
    match Hmac::<Sha256>::new_from_slice(key.as_bytes()) {
        Ok(mac) => BASE64.encode(mac.finalize().into_bytes()),
        Err(_) => String::new(),
    }
}

/// One message a bot accepted.
#[derive(Debug, Clone)]
pub struct ReceivedMessage {
    /// The request body as sent, `timestamp` and `sign` included.
    pub body: Value,
    /// When the receiver accepted it.
    pub received_at: DateTime<Utc>,
    /// Whether it carried a valid signature. Always false for a bot without a secret, which
    /// has nothing to check a signature against.
    pub signed: bool,
}

impl ReceivedMessage {
    /// The value of a card's field as the card shows it (`**Label**\nvalue`), e.g. `Job`,
    /// `Cluster`, `Phase`; `None` when the card has no such field.
    pub fn field(&self, label: &str) -> Option<String> {
        fn strings<'a>(value: &'a Value, out: &mut Vec<&'a str>) {
            match value {
                Value::String(s) => out.push(s),
                Value::Array(items) => items.iter().for_each(|v| strings(v, out)),
                Value::Object(map) => map.values().for_each(|v| strings(v, out)),
                _ => {}
            }
        }
        let mut texts = Vec::new();
        strings(&self.body, &mut texts);
        let prefix = format!("**{label}**\n");
        texts
            .into_iter()
            .find_map(|t| t.strip_prefix(&prefix).map(str::to_string))
    }

    /// The phase a card announces, without the kind's own word after it (`succeeded` of
    /// `succeeded (Completed)`); empty when the card has none.
    pub fn phase(&self) -> String {
        self.field("Phase")
            .unwrap_or_default()
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_string()
    }
}

/// A local Feishu custom-bot service hosting any number of bots.
///
/// Dropping it stops the server and cuts open connections.
pub struct FeishuReceiver {
    addr: SocketAddr,
    state: Arc<State>,
    shutdown: CancellationToken,
}

impl FeishuReceiver {
    /// Binds `127.0.0.1:0` and starts serving on the current Tokio runtime. No bot exists yet:
    /// every token is unknown until [`add_bot`](Self::add_bot).
    pub async fn start() -> anyhow::Result<FeishuReceiver> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .context("binding the Feishu receiver's listener")?;
        let addr = listener
            .local_addr()
            .context("reading the Feishu receiver's address")?;
        let state = Arc::new(State::default());
        let shutdown = CancellationToken::new();
        let handler_state = state.clone();
        tokio::spawn(crate::serve::accept_loop(
            listener,
            shutdown.clone(),
            "Feishu receiver",
            move |req| handle(handler_state.clone(), req),
        ));
        Ok(FeishuReceiver {
            addr,
            state,
            shutdown,
        })
    }

    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The webhook URL of the bot with `token` (whether or not it exists, so a test can point a
    /// plugin at an unknown bot).
    pub fn url(&self, token: &str) -> String {
        format!("http://{}{HOOK_PATH}{token}", self.addr)
    }

    /// Creates the bot `token` and returns its webhook URL. With `secret` every request must be
    /// signed; with `keyword` every message must contain it. Adding a token again replaces that
    /// bot, forgetting its messages, counters and injected faults.
    pub fn add_bot(&self, token: &str, secret: Option<&str>, keyword: Option<&str>) -> String {
        let bot = Bot::new(secret.map(str::to_string), keyword.map(str::to_string));
        self.state.bots().insert(token.to_string(), bot);
        self.url(token)
    }

    /// The next `n` requests to `token` are answered with code [`CODE_FREQUENCY_LIMITED`]
    /// whatever they contain. No effect on an unknown token.
    pub fn throttle_next(&self, token: &str, n: usize) {
        self.state.with_bot(token, |bot| {
            bot.throttle_next = n;
            bot.throttle_until = None;
        });
    }

    /// Like [`throttle_next`](Self::throttle_next), but only requests arriving within `window`
    /// from now are throttled: a burst of throttling, as Feishu's per-second and per-minute
    /// limits give, that ends by itself even when few requests come — a count alone, met by a
    /// client that backs off, throttles it for as long as it takes to send `n` requests.
    pub fn throttle_burst(&self, token: &str, n: usize, window: Duration) {
        let until = Instant::now() + window;
        self.state.with_bot(token, |bot| {
            bot.throttle_next = n;
            bot.throttle_until = Some(until);
        });
    }

    /// The next `n` requests to `token` are answered with HTTP `http_status` (an invalid status
    /// becomes 500) and a plain-text body, as a failing gateway in front of Feishu would. Checked
    /// before [`throttle_next`](Self::throttle_next). No effect on an unknown token.
    pub fn fail_next(&self, token: &str, n: usize, http_status: u16) {
        self.state.with_bot(token, |bot| {
            bot.fail_next = n;
            bot.fail_status = http_status;
        });
    }

    /// Turns the per-bot rate limit on (the default) or off, for tests that send bursts on
    /// purpose. No effect on an unknown token.
    pub fn set_rate_limit(&self, token: &str, enabled: bool) {
        self.state.with_bot(token, |bot| bot.rate_limited = enabled);
    }

    /// The messages `token` accepted, in arrival order; empty for an unknown token.
    pub fn messages(&self, token: &str) -> Vec<ReceivedMessage> {
        self.state
            .with_bot(token, |bot| bot.messages.clone())
            .unwrap_or_default()
    }

    /// Every request `token` received, refused ones included; 0 for an unknown token.
    pub fn attempts(&self, token: &str) -> usize {
        self.state
            .with_bot(token, |bot| bot.attempts)
            .unwrap_or_default()
    }

    /// Waits until `token` has accepted at least `n` messages and returns all of them, or fails
    /// after `timeout` saying how many arrived and how many requests were made.
    pub async fn wait_for_messages(
        &self,
        token: &str,
        n: usize,
        timeout: Duration,
    ) -> anyhow::Result<Vec<ReceivedMessage>> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            // Registered before looking, so a message accepted in between still wakes us.
            let changed = self.state.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let messages = self.messages(token);
            if messages.len() >= n {
                return Ok(messages);
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                let messages = self.messages(token);
                if messages.len() >= n {
                    return Ok(messages);
                }
                anyhow::bail!(
                    "Feishu bot `{token}`: {} of {n} messages after {timeout:?} ({} requests)",
                    messages.len(),
                    self.attempts(token)
                );
            }
        }
    }

    /// Stops the listener and cuts every open connection; later requests are refused.
    pub fn shutdown(&self) {
        self.shutdown.cancel();
    }
}

impl Drop for FeishuReceiver {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// Shared between the handle and the connection tasks.
#[derive(Default)]
struct State {
    bots: Mutex<HashMap<String, Bot>>,
    /// Woken whenever a bot accepts a message.
    changed: Notify,
}

impl State {
    /// The bot table. The lock does not poison: a panic while it was held cannot leave the
    /// table half-updated (every update is a single assignment or push).
    fn bots(&self) -> MutexGuard<'_, HashMap<String, Bot>> {
        self.bots.lock()
    }

    fn with_bot<T>(&self, token: &str, f: impl FnOnce(&mut Bot) -> T) -> Option<T> {
        self.bots().get_mut(token).map(f)
    }
}

/// One bot's settings, injected faults and history.
struct Bot {
    secret: Option<String>,
    keyword: Option<String>,
    rate_limited: bool,
    throttle_next: usize,
    /// When set, throttling ends then, whatever is left of `throttle_next`.
    throttle_until: Option<Instant>,
    fail_next: usize,
    fail_status: u16,
    attempts: usize,
    /// Arrival times of accepted messages in the last minute, oldest first.
    recent: VecDeque<Instant>,
    messages: Vec<ReceivedMessage>,
}

impl Bot {
    fn new(secret: Option<String>, keyword: Option<String>) -> Bot {
        Bot {
            secret,
            keyword,
            rate_limited: true,
            throttle_next: 0,
            throttle_until: None,
            fail_next: 0,
            fail_status: 500,
            attempts: 0,
            recent: VecDeque::new(),
            messages: Vec::new(),
        }
    }

    /// Applies checks 2 to 6 to one request and records the outcome.
    fn decide(&mut self, body: &[u8], now: DateTime<Utc>, clock: Instant) -> Answer {
        self.attempts += 1;
        if self.fail_next > 0 {
            self.fail_next -= 1;
            return Answer::Plain(self.fail_status);
        }
        if self.throttle_until.is_some_and(|until| clock >= until) {
            self.throttle_next = 0;
            self.throttle_until = None;
        }
        if self.throttle_next > 0 {
            self.throttle_next -= 1;
            return Answer::Refused(CODE_FREQUENCY_LIMITED);
        }
        if body.len() > MAX_BODY_BYTES {
            return Answer::Refused(CODE_BAD_REQUEST);
        }
        let Ok(message) = serde_json::from_slice::<Value>(body) else {
            return Answer::Refused(CODE_BAD_REQUEST);
        };
        if !message.get("msg_type").is_some_and(Value::is_string) {
            return Answer::Refused(CODE_BAD_REQUEST);
        }
        let signed = match &self.secret {
            Some(secret) if signature_valid(&message, secret, now.timestamp()) => true,
            Some(_) => return Answer::Refused(CODE_SIGN_MISMATCH),
            None => false,
        };
        if let Some(keyword) = &self.keyword
            && !without_signature(&message).contains(keyword.as_str())
        {
            return Answer::Refused(CODE_KEYWORD_NOT_FOUND);
        }
        if self.rate_limited && self.over_rate(clock) {
            return Answer::Refused(CODE_FREQUENCY_LIMITED);
        }
        self.recent.push_back(clock);
        self.messages.push(ReceivedMessage {
            body: message,
            received_at: now,
            signed,
        });
        Answer::Accepted
    }

    /// Whether one more message now would exceed either window. Forgets arrivals older than the
    /// longer window on the way.
    fn over_rate(&mut self, clock: Instant) -> bool {
        let minute = Duration::from_secs(60);
        let second = Duration::from_secs(1);
        while self
            .recent
            .front()
            .is_some_and(|&t| clock.saturating_duration_since(t) >= minute)
        {
            self.recent.pop_front();
        }
        let last_second = self
            .recent
            .iter()
            .filter(|&&t| clock.saturating_duration_since(t) < second)
            .count();
        last_second >= MAX_PER_SECOND || self.recent.len() >= MAX_PER_MINUTE
    }
}

/// Whether `message` carries a fresh `timestamp` and the matching `sign` for `secret`.
fn signature_valid(message: &Value, secret: &str, now_secs: i64) -> bool {
    let Some(timestamp) = message.get("timestamp").and_then(Value::as_str) else {
        return false;
    };
    let Ok(seconds) = timestamp.parse::<i64>() else {
        return false;
    };
    if now_secs.abs_diff(seconds) > MAX_CLOCK_SKEW_SECS.unsigned_abs() {
        return false;
    }
    message
        .get("sign")
        .and_then(Value::as_str)
        .is_some_and(|sign| sign == sign_text(timestamp, secret))
}

/// The message as the keyword check sees it: the body without its signature fields, so that a
/// keyword can never be satisfied by the Base64 of a signature. serde_json leaves non-ASCII text
/// unescaped, so a keyword in any script is found whether or not the client escaped it.
fn without_signature(message: &Value) -> String {
    let mut content = message.clone();
    if let Some(object) = content.as_object_mut() {
        object.remove("timestamp");
        object.remove("sign");
    }
    content.to_string()
}

/// What to answer one request with.
enum Answer {
    Accepted,
    Refused(i64),
    /// An injected HTTP failure with a plain-text body.
    Plain(u16),
}

impl Answer {
    fn into_response(self) -> Response<Full<Bytes>> {
        match self {
            Answer::Accepted => json_response(
                StatusCode::OK,
                &json!({
                    "StatusCode": 0,
                    "StatusMessage": "success",
                    "code": CODE_SUCCESS,
                    "data": {},
                    "msg": "success",
                }),
            ),
            Answer::Refused(code) => refusal(StatusCode::OK, code),
            Answer::Plain(status) => {
                let status =
                    StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                let mut response = Response::new(Full::new(Bytes::from(format!(
                    "injected failure ({status})"
                ))));
                *response.status_mut() = status;
                response
                    .headers_mut()
                    .insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
                response
            }
        }
    }
}

/// Feishu's text for each refusal code.
fn code_message(code: i64) -> &'static str {
    match code {
        CODE_BAD_REQUEST => "Bad Request",
        CODE_FREQUENCY_LIMITED => "frequency limited",
        CODE_TOKEN_INVALID => "param invalid: incoming webhook access token invalid",
        CODE_SIGN_MISMATCH => "sign match fail or timestamp is not within one hour",
        CODE_KEYWORD_NOT_FOUND => "Key Words Not Found",
        _ => "unknown error",
    }
}

fn refusal(status: StatusCode, code: i64) -> Response<Full<Bytes>> {
    json_response(
        status,
        &json!({ "code": code, "msg": code_message(code), "data": {} }),
    )
}

fn json_response(status: StatusCode, body: &Value) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

async fn handle(
    state: Arc<State>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let token = match req.uri().path().strip_prefix(HOOK_PATH) {
        Some(token) if !token.is_empty() && !token.contains('/') => token.to_string(),
        _ => return Ok(refusal(StatusCode::NOT_FOUND, CODE_TOKEN_INVALID)),
    };
    if !state.bots().contains_key(&token) {
        return Ok(refusal(StatusCode::NOT_FOUND, CODE_TOKEN_INVALID));
    }
    if req.method() != Method::POST {
        return Ok(refusal(StatusCode::METHOD_NOT_ALLOWED, CODE_BAD_REQUEST));
    }
    // A body that cannot be read whole (over the read limit, or the client hung up) is judged
    // as an over-long one: bigger than any acceptable body.
    let body = match Limited::new(req.into_body(), READ_LIMIT).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => Bytes::from(vec![b' '; MAX_BODY_BYTES + 1]),
    };
    let Some(answer) = state.with_bot(&token, |bot| bot.decide(&body, Utc::now(), Instant::now()))
    else {
        // Replaced or removed while the body was being read: as unknown as before.
        return Ok(refusal(StatusCode::NOT_FOUND, CODE_TOKEN_INVALID));
    };
    if matches!(answer, Answer::Accepted) {
        state.changed.notify_waiters();
    }
    Ok(answer.into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    use hyper_util::client::legacy::Client;
    use hyper_util::client::legacy::connect::HttpConnector;
    use hyper_util::rt::TokioExecutor;

    const WAIT: Duration = Duration::from_secs(5);

    type HttpClient = Client<HttpConnector, Full<Bytes>>;

    fn client() -> HttpClient {
        Client::builder(TokioExecutor::new()).build_http()
    }

    /// Posts `body` and returns the HTTP status and the body as text.
    async fn post_raw(client: &HttpClient, url: &str, body: Vec<u8>) -> (u16, String) {
        let request = Request::builder()
            .method(Method::POST)
            .uri(url)
            .header(CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body)))
            .expect("building the request");
        let response = client.request(request).await.expect("sending the request");
        let status = response.status().as_u16();
        let bytes = response
            .into_body()
            .collect()
            .await
            .expect("reading the response")
            .to_bytes();
        (
            status,
            String::from_utf8(bytes.to_vec()).expect("a UTF-8 response"),
        )
    }

    /// Posts `body` as JSON and returns the HTTP status and Feishu's `code`.
    async fn post(client: &HttpClient, url: &str, body: &Value) -> (u16, i64, Value) {
        let (status, text) = post_raw(client, url, body.to_string().into_bytes()).await;
        let answer: Value = serde_json::from_str(&text).expect("a JSON answer");
        let code = answer["code"].as_i64().expect("a numeric code");
        (status, code, answer)
    }

    fn text_message(text: &str) -> Value {
        json!({ "msg_type": "text", "content": { "text": text } })
    }

    fn signed(mut message: Value, timestamp: i64, secret: &str) -> Value {
        message["timestamp"] = json!(timestamp.to_string());
        message["sign"] = json!(sign(timestamp, secret));
        message
    }

    #[test]
    fn sign_matches_an_independent_hmac() {
        let (timestamp, secret) = (1_599_360_473_i64, "demo-secret");
        let mut mac = Hmac::<Sha256>::new_from_slice(b"1599360473\ndemo-secret")
            .expect("HMAC accepts any key");
        mac.update(b"");
        let expected = BASE64.encode(mac.finalize().into_bytes());
        assert_eq!(sign(timestamp, secret), expected);
        // And a vector computed outside Rust (Python's hmac module), so a change that breaks
        // both computations the same way is caught too.
        assert_eq!(expected, "3/MaVZ8JLIy4TUG+7KSFJqvUkTKd+HWY8g+56DZWq8s=");
        assert_ne!(sign(timestamp + 1, secret), expected);
        assert_ne!(sign(timestamp, "other"), expected);
    }

    #[tokio::test]
    async fn accepts_a_signed_message_and_records_it() {
        let feishu = FeishuReceiver::start().await.expect("receiver starts");
        let url = feishu.add_bot("ok", Some("s3cret"), Some("jobrelay"));
        let message = signed(
            text_message("jobrelay: train succeeded"),
            Utc::now().timestamp(),
            "s3cret",
        );
        let (status, code, answer) = post(&client(), &url, &message).await;
        assert_eq!((status, code), (200, CODE_SUCCESS));
        assert_eq!(answer["msg"], "success");
        assert_eq!(answer["StatusCode"], 0);
        assert_eq!(answer["StatusMessage"], "success");
        assert_eq!(answer["data"], json!({}));

        let received = feishu
            .wait_for_messages("ok", 1, WAIT)
            .await
            .expect("the message arrives");
        assert_eq!(received.len(), 1);
        assert_eq!(received[0].body, message);
        assert!(received[0].signed);
        assert_eq!(feishu.attempts("ok"), 1);
    }

    #[tokio::test]
    async fn unsigned_bot_accepts_without_signature() {
        let feishu = FeishuReceiver::start().await.expect("receiver starts");
        let url = feishu.add_bot("plain", None, None);
        let (status, code, _) = post(&client(), &url, &text_message("hi")).await;
        assert_eq!((status, code), (200, CODE_SUCCESS));
        let received = feishu.messages("plain");
        assert_eq!(received.len(), 1);
        assert!(!received[0].signed);
    }

    #[tokio::test]
    async fn refuses_a_bad_signature() {
        let feishu = FeishuReceiver::start().await.expect("receiver starts");
        let url = feishu.add_bot("sig", Some("right"), None);
        let client = client();
        let now = Utc::now().timestamp();

        let wrong_secret = signed(text_message("hi"), now, "wrong");
        let (status, code, answer) = post(&client, &url, &wrong_secret).await;
        assert_eq!((status, code), (200, CODE_SIGN_MISMATCH));
        assert_eq!(
            answer["msg"],
            "sign match fail or timestamp is not within one hour"
        );

        let unsigned = text_message("hi");
        let (_, code, _) = post(&client, &url, &unsigned).await;
        assert_eq!(code, CODE_SIGN_MISMATCH);

        assert!(feishu.messages("sig").is_empty());
        assert_eq!(feishu.attempts("sig"), 2);
    }

    #[tokio::test]
    async fn refuses_a_timestamp_over_an_hour_old() {
        let feishu = FeishuReceiver::start().await.expect("receiver starts");
        let url = feishu.add_bot("stale", Some("s"), None);
        let client = client();
        let now = Utc::now().timestamp();

        let stale = signed(text_message("hi"), now - MAX_CLOCK_SKEW_SECS - 60, "s");
        let (_, code, _) = post(&client, &url, &stale).await;
        assert_eq!(code, CODE_SIGN_MISMATCH);

        let future = signed(text_message("hi"), now + MAX_CLOCK_SKEW_SECS + 60, "s");
        let (_, code, _) = post(&client, &url, &future).await;
        assert_eq!(code, CODE_SIGN_MISMATCH);

        let recent = signed(text_message("hi"), now - 600, "s");
        let (_, code, _) = post(&client, &url, &recent).await;
        assert_eq!(code, CODE_SUCCESS, "ten minutes of skew is fine");
    }

    #[tokio::test]
    async fn refuses_a_message_without_the_keyword() {
        let feishu = FeishuReceiver::start().await.expect("receiver starts");
        let url = feishu.add_bot("kw", None, Some("训练"));
        let client = client();

        let (status, code, answer) = post(&client, &url, &text_message("job done")).await;
        assert_eq!((status, code), (200, CODE_KEYWORD_NOT_FOUND));
        assert_eq!(answer["msg"], "Key Words Not Found");

        // Escaped or not on the wire, the keyword is found in the message.
        let escaped = br#"{"msg_type":"text","content":{"text":"\u8bad\u7ec3 done"}}"#.to_vec();
        let (_, text) = post_raw(&client, &url, escaped).await;
        assert!(text.contains("\"code\":0"), "{text}");
        assert_eq!(feishu.messages("kw").len(), 1);
    }

    #[tokio::test]
    async fn keyword_in_the_signature_does_not_count() {
        let feishu = FeishuReceiver::start().await.expect("receiver starts");
        let url = feishu.add_bot("kw-sign", None, Some("1599"));
        let mut message = text_message("hi");
        message["timestamp"] = json!("1599360473");
        let (_, code, _) = post(&client(), &url, &message).await;
        assert_eq!(code, CODE_KEYWORD_NOT_FOUND);
    }

    #[tokio::test]
    async fn refuses_bodies_over_20_kb_and_malformed_ones() {
        let feishu = FeishuReceiver::start().await.expect("receiver starts");
        let url = feishu.add_bot("big", None, None);
        let client = client();

        let filler = "x".repeat(MAX_BODY_BYTES);
        let (status, code, answer) = post(&client, &url, &text_message(&filler)).await;
        assert_eq!((status, code), (200, CODE_BAD_REQUEST));
        assert_eq!(answer["msg"], "Bad Request");

        let (_, text) = post_raw(&client, &url, b"not json".to_vec()).await;
        assert!(text.contains("9499"), "{text}");

        let (_, code, _) = post(&client, &url, &json!({ "content": { "text": "hi" } })).await;
        assert_eq!(code, CODE_BAD_REQUEST, "msg_type is required");

        // Just under the limit is fine.
        let skeleton = text_message("").to_string().len();
        let fits = "y".repeat(MAX_BODY_BYTES - skeleton);
        let (_, code, _) = post(&client, &url, &text_message(&fits)).await;
        assert_eq!(code, CODE_SUCCESS);
        assert_eq!(feishu.messages("big").len(), 1);
        assert_eq!(feishu.attempts("big"), 4);
    }

    #[tokio::test]
    async fn throttle_next_refuses_that_many_requests() {
        let feishu = FeishuReceiver::start().await.expect("receiver starts");
        let url = feishu.add_bot("thr", None, None);
        let client = client();
        feishu.throttle_next("thr", 2);
        for _ in 0..2 {
            let (status, code, answer) = post(&client, &url, &text_message("hi")).await;
            assert_eq!((status, code), (200, CODE_FREQUENCY_LIMITED));
            assert_eq!(answer["msg"], "frequency limited");
        }
        let (_, code, _) = post(&client, &url, &text_message("hi")).await;
        assert_eq!(code, CODE_SUCCESS);
        assert_eq!(feishu.messages("thr").len(), 1);
        assert_eq!(feishu.attempts("thr"), 3);
    }

    #[tokio::test]
    async fn a_throttle_burst_ends_with_its_window_whatever_is_left() {
        let feishu = FeishuReceiver::start().await.expect("receiver starts");
        let url = feishu.add_bot("burst", None, None);
        let client = client();
        feishu.throttle_burst("burst", 10, Duration::from_millis(300));
        let (_, code, _) = post(&client, &url, &text_message("hi")).await;
        assert_eq!(code, CODE_FREQUENCY_LIMITED, "inside the window");
        tokio::time::sleep(Duration::from_millis(400)).await;
        let (_, code, _) = post(&client, &url, &text_message("hi")).await;
        assert_eq!(
            code, CODE_SUCCESS,
            "9 throttles were left, but the window is over"
        );
        assert_eq!(feishu.messages("burst").len(), 1);
    }

    #[tokio::test]
    async fn sixth_request_within_a_second_is_throttled() {
        let feishu = FeishuReceiver::start().await.expect("receiver starts");
        let url = feishu.add_bot("rate", None, None);
        let client = client();
        let started = Instant::now();
        let mut codes = Vec::new();
        for i in 0..6 {
            let (_, code, _) = post(&client, &url, &text_message(&format!("n{i}"))).await;
            codes.push(code);
        }
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "six local requests took {:?}; the window could not be tested",
            started.elapsed()
        );
        assert_eq!(codes, [0, 0, 0, 0, 0, CODE_FREQUENCY_LIMITED]);
        assert_eq!(
            feishu.messages("rate").len(),
            5,
            "a throttled message is not recorded"
        );

        // A second later the window has room again.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let (_, code, _) = post(&client, &url, &text_message("later")).await;
        assert_eq!(code, CODE_SUCCESS);

        // Without the limit, bursts go through.
        feishu.set_rate_limit("rate", false);
        for _ in 0..6 {
            let (_, code, _) = post(&client, &url, &text_message("burst")).await;
            assert_eq!(code, CODE_SUCCESS);
        }
    }

    #[test]
    fn minute_window_counts_a_hundred() {
        let mut bot = Bot::new(None, None);
        let start = Instant::now();
        // 100 messages spread over 50 s never exceed 5 per second...
        for i in 0..100u64 {
            let at = start + Duration::from_millis(i * 500);
            assert!(!bot.over_rate(at), "message {i}");
            bot.recent.push_back(at);
        }
        // ...but the 101st within the minute is refused, and once the first ones age out
        // there is room again.
        assert!(bot.over_rate(start + Duration::from_secs(55)));
        assert!(!bot.over_rate(start + Duration::from_secs(61)));
    }

    #[tokio::test]
    async fn fail_next_answers_with_the_http_status() {
        let feishu = FeishuReceiver::start().await.expect("receiver starts");
        let url = feishu.add_bot("down", None, None);
        let client = client();
        feishu.fail_next("down", 1, 500);
        let (status, text) =
            post_raw(&client, &url, text_message("hi").to_string().into_bytes()).await;
        assert_eq!(status, 500);
        assert!(
            serde_json::from_str::<Value>(&text).is_err(),
            "a plain body: {text}"
        );
        let (status, code, _) = post(&client, &url, &text_message("hi")).await;
        assert_eq!((status, code), (200, CODE_SUCCESS));
        assert_eq!(feishu.attempts("down"), 2);
        assert_eq!(feishu.messages("down").len(), 1);
    }

    #[tokio::test]
    async fn unknown_token_is_not_found() {
        let feishu = FeishuReceiver::start().await.expect("receiver starts");
        feishu.add_bot("known", None, None);
        let (status, code, _) = post(&client(), &feishu.url("nope"), &text_message("hi")).await;
        assert_eq!((status, code), (404, CODE_TOKEN_INVALID));
        assert_eq!(feishu.attempts("nope"), 0);
        assert_eq!(feishu.attempts("known"), 0);
    }

    #[tokio::test]
    async fn wait_for_messages_times_out_with_a_count() {
        let feishu = FeishuReceiver::start().await.expect("receiver starts");
        let url = feishu.add_bot("wait", None, None);
        let waiter = feishu.wait_for_messages("wait", 2, WAIT);
        let sender = async {
            let client = client();
            post(&client, &url, &text_message("one")).await;
            post(&client, &url, &text_message("two")).await;
        };
        let (received, ()) = tokio::join!(waiter, sender);
        assert_eq!(received.expect("both arrive").len(), 2);

        let error = feishu
            .wait_for_messages("wait", 3, Duration::from_millis(100))
            .await
            .expect_err("no third message");
        assert!(error.to_string().contains("2 of 3"), "{error}");
    }
}
