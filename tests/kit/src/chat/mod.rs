//! Stand-ins for four notification services, for end-to-end tests of notifier plugins: DingTalk
//! custom robots ([`dingtalk`]), WeCom group robots ([`wecom`]), Slack incoming webhooks
//! ([`slack`]) and a generic CloudEvents webhook signed the Standard Webhooks way ([`webhook`]).
//!
//! [`ChatReceiver::start`] serves one [`Provider`] over real HTTP on `127.0.0.1`, hosting any
//! number of bots keyed by token. What the four services have in common lives here, once: the
//! bot table, injected faults, rate limits, counters, waiting for messages and the HTTP
//! plumbing. What each does differently — where the token sits in the URL, how requests are
//! signed, what a valid body is and what the service answers — is that service's contract, in
//! its own module: a route, a few fixed answers, a rate limit, and a function from request to
//! verdict whose module docs list its checks.
//!
//! Every request goes through the same first steps, and the first that fails decides the answer:
//!
//! 1. no bot with the request's token: the service's "unknown" answer (a request that names a
//!    token still counts in that token's [`attempts`](ChatReceiver::attempts) and
//!    [`refusals`](ChatReceiver::refusals));
//! 2. [`fail_next`](ChatReceiver::fail_next): that HTTP status with a plain-text body;
//! 3. [`throttle_next`](ChatReceiver::throttle_next), then the service's own rate limit
//!    ([`set_rate_limit`](ChatReceiver::set_rate_limit)): the service's throttle answer;
//! 4. a method other than `POST`: HTTP 405;
//! 5. the service's own checks, listed in its module.
//!
//! Knowingly simplified: only accepted messages count towards a rate limit (a refused request
//! delivered nothing, so it used none of the bot's quota); a body over 1 MiB is not read at all
//! and is answered with HTTP 413 without reaching any bot (every service refuses far smaller
//! bodies anyway); a request to a path the service does not serve is answered as one to an
//! unknown token; tokens in a URL path are taken as written, not percent-decoded.

pub mod dingtalk;
pub mod slack;
pub mod webhook;
pub mod wecom;

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::fmt;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use base64::{Engine as _, engine::general_purpose::STANDARD as BASE64};
use bytes::Bytes;
use chrono::{DateTime, Utc};
use hmac::{Hmac, Mac};
use http_body_util::{BodyExt, Full, Limited};
use hyper::header::{CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use hyper::{Method, Request, Response, StatusCode, body::Incoming};
use parking_lot::{Mutex, MutexGuard};
use serde_json::{Value, json};
use sha2::Sha256;
use tokio::{net::TcpListener, sync::Notify};
use tokio_util::sync::CancellationToken;

/// A body larger than this is not read to the end: HTTP 413, whatever the service.
const READ_LIMIT: usize = 1024 * 1024;

/// The service a [`ChatReceiver`] stands in for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    /// A DingTalk custom robot: [`dingtalk`].
    DingTalk,
    /// A WeCom (企业微信) group robot: [`wecom`].
    WeCom,
    /// A Slack incoming webhook: [`slack`].
    Slack,
    /// A generic webhook taking CloudEvents signed the Standard Webhooks way: [`webhook`].
    Webhook,
}

impl Provider {
    /// The service's name, for messages.
    pub fn name(self) -> &'static str {
        match self {
            Provider::DingTalk => "DingTalk",
            Provider::WeCom => "WeCom",
            Provider::Slack => "Slack",
            Provider::Webhook => "webhook",
        }
    }

    fn contract(self) -> Contract {
        match self {
            Provider::DingTalk => dingtalk::contract(),
            Provider::WeCom => wecom::contract(),
            Provider::Slack => slack::contract(),
            Provider::Webhook => webhook::contract(),
        }
    }
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One message a bot accepted.
#[derive(Debug, Clone)]
pub struct Received {
    /// The request body parsed as JSON. For a [`Provider::Webhook`] event in binary mode, the
    /// event's data: parsed as JSON when its Content-Type is JSON (or absent) and it parses,
    /// else the body as a string; `Null` when the event has no data.
    pub body: Value,
    /// The request's headers, names lower-cased, in the order sent (the values of a repeated
    /// header together).
    pub headers: Vec<(String, String)>,
    /// When the receiver accepted it.
    pub received_at: DateTime<Utc>,
    /// Whether it carried a valid signature; always false for a bot without a secret, and for
    /// services that do not sign (WeCom, Slack).
    pub signed: bool,
}

impl Received {
    /// Every string in the body, and for a webhook event in binary mode the `ce-*` header
    /// values before them, joined by newlines: for "the message mentions job X" assertions.
    pub fn text(&self) -> String {
        let mut parts: Vec<&str> = Vec::new();
        if self.cloudevents_mode() == Some(webhook::Mode::Binary) {
            parts.extend(
                self.headers
                    .iter()
                    .filter(|(name, _)| name.starts_with("ce-"))
                    .map(|(_, value)| value.as_str()),
            );
        }
        parts.extend(strings(&self.body));
        parts.join("\n")
    }

    /// The first value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        find_header(&self.headers, name)
    }

    /// How a webhook event was sent ([`webhook::mode`]); `None` for the other services'
    /// messages.
    pub fn cloudevents_mode(&self) -> Option<webhook::Mode> {
        webhook::mode(&self.headers)
    }
}

/// A local stand-in for one notification service, hosting any number of bots.
///
/// Dropping it stops the server and cuts open connections.
pub struct ChatReceiver {
    provider: Provider,
    addr: SocketAddr,
    state: Arc<State>,
    shutdown: CancellationToken,
}

impl ChatReceiver {
    /// Binds `127.0.0.1:0` and serves `provider`'s contract on the current Tokio runtime. No
    /// bot exists yet: every token is unknown until [`add_bot`](Self::add_bot).
    pub async fn start(provider: Provider) -> anyhow::Result<ChatReceiver> {
        let what = provider.name();
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .with_context(|| format!("binding the {what} receiver's listener"))?;
        let receiver = ChatReceiver {
            provider,
            addr: listener.local_addr()?,
            state: Arc::new(State::new(provider.contract())),
            shutdown: CancellationToken::new(),
        };
        let state = receiver.state.clone();
        let serve = move |req| answer(state.clone(), req);
        let accepting = crate::serve::accept_loop(listener, receiver.shutdown.clone(), what, serve);
        tokio::spawn(accepting);
        Ok(receiver)
    }

    /// The service this receiver stands in for.
    pub fn provider(&self) -> Provider {
        self.provider
    }

    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Creates bot `token` and returns its URL. With `secret`, requests must be signed (by
    /// services that sign: DingTalk and the webhook; WeCom and Slack ignore it). Adding a token
    /// again replaces that bot, forgetting its settings, faults, counters and messages.
    pub fn add_bot(&self, token: &str, secret: Option<&str>) -> String {
        let config = BotConfig {
            secret: secret.map(str::to_string),
            keyword: None,
        };
        self.state
            .bots()
            .insert(token.to_string(), Bot::new(Some(config)));
        self.url(token)
    }

    /// The URL of bot `token`, whether or not it exists (so a plugin can be pointed at an
    /// unknown bot):
    ///
    /// - DingTalk: `http://ADDR/robot/send?access_token=TOKEN`
    /// - WeCom: `http://ADDR/cgi-bin/webhook/send?key=TOKEN`
    /// - Slack: `http://ADDR/services/T0JOBRELAY/B0JOBRELAY/TOKEN`
    /// - Webhook: `http://ADDR/hooks/TOKEN`
    pub fn url(&self, token: &str) -> String {
        self.state.contract.route.url(self.addr, token)
    }

    /// DingTalk's "custom keyword" security setting: every message must contain `keyword`; an
    /// empty one turns the setting off. Ignored by the other services; no effect on an unknown
    /// token.
    pub fn set_keyword(&self, token: &str, keyword: &str) {
        let keyword = (!keyword.is_empty()).then(|| keyword.to_string());
        self.state.with_bot(token, |bot| {
            if let Some(config) = &mut bot.config {
                config.keyword = keyword;
            }
        });
    }

    /// The next `n` requests to `token` get the service's own throttle answer, whatever they
    /// contain. No effect on an unknown token.
    pub fn throttle_next(&self, token: &str, n: usize) {
        self.state.with_bot(token, |bot| bot.throttle_next = n);
    }

    /// The next `n` requests to `token` get HTTP `status` (an invalid one becomes 500) with a
    /// plain-text body, as from a failing gateway in front of the service. Checked before
    /// [`throttle_next`](Self::throttle_next). No effect on an unknown token.
    pub fn fail_next(&self, token: &str, n: usize, status: u16) {
        let status = StatusCode::from_u16(status).map_or(500, |s| s.as_u16());
        self.state.with_bot(token, |bot| {
            bot.fail_next = n;
            bot.fail_status = status;
        });
    }

    /// Turns the service's real per-bot rate limit on (the default) or off, for tests that send
    /// bursts on purpose. The webhook has none. No effect on an unknown token.
    pub fn set_rate_limit(&self, token: &str, enabled: bool) {
        self.state.with_bot(token, |bot| bot.rate_limited = enabled);
    }

    /// The messages `token` accepted, in arrival order.
    pub fn messages(&self, token: &str) -> Vec<Received> {
        self.state.read(token, |bot| bot.messages.clone())
    }

    /// One line per request `token` refused, in arrival order: the answer given, as
    /// `errcode 310000: sign not match, more: […]` for a JSON answer with an error code, or
    /// `HTTP 401: bad signature` for a plain one; where the answer does not say what was wrong
    /// (Slack's `invalid_blocks`, a webhook's 401), the reason follows in parentheses.
    pub fn refusals(&self, token: &str) -> Vec<String> {
        self.state.read(token, |bot| bot.refusals.clone())
    }

    /// Every request to `token`, refused ones included (requests to it before it was added
    /// too, until [`add_bot`](Self::add_bot) starts afresh).
    pub fn attempts(&self, token: &str) -> usize {
        self.state.read(token, |bot| bot.attempts)
    }

    /// Waits until `token` has accepted at least `n` messages and returns all of them, or fails
    /// after `timeout` saying how many arrived, how many requests were made and what the last
    /// refusal was.
    pub async fn wait_for_messages(
        &self,
        token: &str,
        n: usize,
        timeout: std::time::Duration,
    ) -> anyhow::Result<Vec<Received>> {
        let enough = async {
            loop {
                let mut changed = std::pin::pin!(self.state.changed.notified());
                // Registered before looking, so a message accepted in between still wakes us.
                changed.as_mut().enable();
                let messages = self.messages(token);
                if messages.len() >= n {
                    return messages;
                }
                changed.await;
            }
        };
        if let Ok(messages) = tokio::time::timeout(timeout, enough).await {
            return Ok(messages);
        }
        let messages = self.messages(token);
        if messages.len() >= n {
            // Accepted just as the time ran out.
            return Ok(messages);
        }
        let (got, attempts) = (messages.len(), self.attempts(token));
        let last = self.refusals(token).pop().unwrap_or_else(|| "none".into());
        anyhow::bail!(
            "{} bot `{token}`: {got} of {n} messages after {timeout:?} \
             ({attempts} requests; last refusal: {last})",
            self.provider
        )
    }

    /// Stops the listener and cuts every open connection; later requests are refused.
    pub fn shutdown(&self) {
        self.shutdown.cancel();
    }
}

impl Drop for ChatReceiver {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// What one service does differently from the others, handed over by its module.
pub(crate) struct Contract {
    pub(crate) route: Route,
    /// The answer for a token that names no bot.
    pub(crate) unknown: Answer,
    /// The answer for a throttled request.
    pub(crate) throttled: Answer,
    /// The answer for an accepted message.
    pub(crate) accepted: Answer,
    /// The real per-bot rate limit, if the service has one.
    pub(crate) limit: Option<Limit>,
    /// The service's own checks (step 5 of the [module docs](self)).
    pub(crate) judge: fn(&Inbound, &BotConfig, DateTime<Utc>) -> Verdict,
}

impl Contract {
    /// The contract of a service that answers every request with HTTP 200 and an error code,
    /// `0`/`ok` for an accepted message (DingTalk, WeCom), and takes at most `per_minute`
    /// messages per bot in any sixty seconds.
    pub(crate) fn with_errcodes(
        route: Route,
        [unknown, throttled]: [Answer; 2],
        per_minute: usize,
        judge: fn(&Inbound, &BotConfig, DateTime<Utc>) -> Verdict,
    ) -> Contract {
        let per = Duration::from_secs(60);
        Contract {
            route,
            unknown,
            throttled,
            accepted: Answer::errcode(0, "ok"),
            limit: Some(Limit::Window {
                max: per_minute,
                per,
            }),
            judge,
        }
    }
}

/// Where a service expects a bot's token.
pub(crate) enum Route {
    /// `POST {path}?{param}=TOKEN`.
    Query {
        path: &'static str,
        param: &'static str,
    },
    /// `POST {prefix}TOKEN`.
    PathTail { prefix: &'static str },
}

impl Route {
    fn url(&self, addr: SocketAddr, token: &str) -> String {
        match self {
            Route::Query { path, param } => {
                let token: String = form_urlencoded::byte_serialize(token.as_bytes()).collect();
                format!("http://{addr}{path}?{param}={token}")
            }
            Route::PathTail { prefix } => format!("http://{addr}{prefix}{token}"),
        }
    }

    /// The token `req` addresses, if it addresses one at all.
    pub(crate) fn token(&self, req: &Inbound) -> Option<String> {
        let token = match self {
            Route::Query { path, param } if req.path == *path => req.query(param)?,
            Route::Query { .. } => return None,
            Route::PathTail { prefix } => req.path.strip_prefix(prefix)?.to_string(),
        };
        (!token.is_empty() && !token.contains('/')).then_some(token)
    }
}

/// A per-bot rate limit on accepted messages.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Limit {
    /// At most `max` in any window of length `per`.
    Window { max: usize, per: Duration },
    /// A token bucket: `burst` at once, then one more every `every`.
    Bucket { burst: u32, every: Duration },
}

/// A bot's record of accepted messages, as far as its [`Limit`] needs it.
#[derive(Default)]
struct Meter {
    /// [`Limit::Window`]: arrival times within the window, oldest first.
    recent: VecDeque<Instant>,
    /// [`Limit::Bucket`]: when the bucket is full again (the "theoretical arrival time").
    refilled_at: Option<Instant>,
}

impl Meter {
    /// Whether one more message at `clock` would exceed `limit`.
    fn full(&mut self, limit: Limit, clock: Instant) -> bool {
        match limit {
            Limit::Window { max, per } => {
                let expired = |t: &Instant| clock.saturating_duration_since(*t) >= per;
                while self.recent.front().is_some_and(expired) {
                    self.recent.pop_front();
                }
                self.recent.len() >= max
            }
            Limit::Bucket { burst, every } => {
                let slack = every * burst.saturating_sub(1);
                self.refilled_at.is_some_and(|t| t > clock + slack)
            }
        }
    }

    /// Counts a message accepted at `clock`.
    fn record(&mut self, limit: Limit, clock: Instant) {
        match limit {
            Limit::Window { .. } => self.recent.push_back(clock),
            Limit::Bucket { every, .. } => {
                let from = self.refilled_at.map_or(clock, |t| t.max(clock));
                self.refilled_at = Some(from + every);
            }
        }
    }
}

/// One request as the contracts see it: everything read, nothing interpreted yet.
pub(crate) struct Inbound {
    pub(crate) method: Method,
    pub(crate) path: String,
    /// The raw query string, without `?`; empty when there is none.
    pub(crate) query: String,
    /// Names lower-cased, values as sent (lossily decoded when not UTF-8).
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Bytes,
}

impl Inbound {
    /// Reads a whole request, or answers 413 for a body over [`READ_LIMIT`] (or cut short).
    async fn read(req: Request<Incoming>) -> Result<Inbound, Answer> {
        let (head, body) = req.into_parts();
        let body = match Limited::new(body, READ_LIMIT).collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(e) => return Err(Answer::text(413, "request body too large").because(e)),
        };
        let headers = head.headers.iter().map(|(name, value)| {
            let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
            (name.as_str().to_string(), value)
        });
        Ok(Inbound {
            method: head.method,
            path: head.uri.path().to_string(),
            query: head.uri.query().unwrap_or_default().to_string(),
            headers: headers.collect(),
            body,
        })
    }

    /// The first value of header `name` (any case).
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        find_header(&self.headers, name)
    }

    /// The first query parameter `name`, form-decoded (`%2B` is `+`, and `+` is a space).
    pub(crate) fn query(&self, name: &str) -> Option<String> {
        form_urlencoded::parse(self.query.as_bytes())
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.into_owned())
    }

    /// The Content-Type without parameters, lower-cased: `application/json` of
    /// `Application/JSON; charset=utf-8`.
    pub(crate) fn media_type(&self) -> Option<String> {
        media_type(&self.headers)
    }
}

/// The Content-Type in `headers` without parameters, lower-cased.
fn media_type(headers: &[(String, String)]) -> Option<String> {
    let content_type = find_header(headers, "content-type")?;
    let media = content_type.split(';').next().unwrap_or_default();
    Some(media.trim().to_ascii_lowercase())
}

fn find_header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(key, _)| key.eq_ignore_ascii_case(name))
        .map(|(_, value)| value.as_str())
}

/// A bot's settings, as its service's checks see them.
#[derive(Debug, Clone, Default)]
pub(crate) struct BotConfig {
    pub(crate) secret: Option<String>,
    /// DingTalk's custom keyword.
    pub(crate) keyword: Option<String>,
}

impl BotConfig {
    /// Whether a request is signed: `Ok(false)` for a bot without a secret, `Ok(true)` when
    /// `check` accepts the request's signature for the secret, else `check`'s refusal.
    pub(crate) fn verify(
        &self,
        check: impl FnOnce(&str) -> Result<(), Answer>,
    ) -> Result<bool, Answer> {
        self.secret
            .as_deref()
            .map(check)
            .transpose()
            .map(|checked| checked.is_some())
    }
}

/// What a service's checks make of a request that got past the shared ones.
pub(crate) type Verdict = Result<Accepted, Answer>;

/// A message a service's checks let through.
#[derive(Debug)]
pub(crate) struct Accepted {
    pub(crate) body: Value,
    pub(crate) signed: bool,
}

/// One HTTP answer, with the line [`ChatReceiver::refusals`] records for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) content_type: Option<&'static str>,
    pub(crate) body: String,
    /// A `Retry-After` header, in seconds.
    pub(crate) retry_after: Option<u32>,
    pub(crate) summary: String,
}

impl Answer {
    fn new(status: u16, content_type: Option<&'static str>, body: String, summary: String) -> Self {
        Answer {
            status,
            content_type,
            body,
            retry_after: None,
            summary,
        }
    }

    /// HTTP 200 with `{"errcode": code, "errmsg": message}`, as DingTalk and WeCom answer.
    pub(crate) fn errcode(code: i64, message: impl Into<String>) -> Answer {
        let message = message.into();
        let body = json!({ "errcode": code, "errmsg": message }).to_string();
        let summary = format!("errcode {code}: {message}");
        Answer::new(200, Some("application/json"), body, summary)
    }

    /// HTTP `status` with a plain-text body.
    pub(crate) fn text(status: u16, text: impl Into<String>) -> Answer {
        let text = text.into();
        let summary = format!("HTTP {status}: {text}");
        Answer::new(status, Some("text/plain; charset=utf-8"), text, summary)
    }

    /// HTTP 204, no body.
    pub(crate) fn no_content() -> Answer {
        Answer::new(204, None, String::new(), "HTTP 204".into())
    }

    /// The same answer with a `Retry-After` header.
    pub(crate) fn retry_after(self, seconds: u32) -> Answer {
        Answer {
            retry_after: Some(seconds),
            ..self
        }
    }

    /// The same answer, with `reason` added to the refusal line only.
    pub(crate) fn because(mut self, reason: impl fmt::Display) -> Answer {
        self.summary = format!("{} ({reason})", self.summary);
        self
    }

    fn into_response(self) -> Response<Full<Bytes>> {
        let mut response = Response::new(Full::new(Bytes::from(self.body)));
        *response.status_mut() =
            StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let headers = response.headers_mut();
        if let Some(content_type) = self.content_type {
            headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
        }
        if let Some(seconds) = self.retry_after {
            headers.insert(RETRY_AFTER, seconds.into());
        }
        response
    }
}

/// Shared between the handle and the connection tasks.
struct State {
    contract: Contract,
    bots: Mutex<HashMap<String, Bot>>,
    /// Woken whenever a bot accepts a message.
    changed: Notify,
}

impl State {
    fn new(contract: Contract) -> State {
        State {
            contract,
            bots: Mutex::default(),
            changed: Notify::new(),
        }
    }

    /// The bot table. The lock does not poison: every update is a single assignment or push,
    /// so a panic while it was held cannot have left it half-updated.
    fn bots(&self) -> MutexGuard<'_, HashMap<String, Bot>> {
        self.bots.lock()
    }

    fn with_bot(&self, token: &str, f: impl FnOnce(&mut Bot)) {
        if let Some(bot) = self.bots().get_mut(token) {
            f(bot);
        }
    }

    fn read<T: Default>(&self, token: &str, f: impl FnOnce(&Bot) -> T) -> T {
        self.bots().get(token).map(f).unwrap_or_default()
    }

    /// Judges one request and records the outcome with the bot it names.
    fn receive(&self, req: Inbound, now: DateTime<Utc>, clock: Instant) -> Answer {
        let contract = &self.contract;
        let Some(token) = contract.route.token(&req) else {
            return contract.unknown.clone();
        };
        let outcome = {
            let mut bots = self.bots();
            let bot = bots.entry(token).or_insert_with(|| Bot::new(None));
            bot.attempts += 1;
            let outcome = bot.decide(contract, &req, now, clock);
            match &outcome {
                Ok(received) => bot.messages.push(received.clone()),
                Err(refusal) => bot.refusals.push(refusal.summary.clone()),
            }
            outcome
        };
        match outcome {
            Ok(_) => {
                self.changed.notify_waiters();
                contract.accepted.clone()
            }
            Err(refusal) => refusal,
        }
    }
}

/// One bot's settings, injected faults and history.
struct Bot {
    /// `None` for a token nobody added: its requests are answered as unknown, but counted.
    config: Option<BotConfig>,
    fail_next: usize,
    fail_status: u16,
    throttle_next: usize,
    rate_limited: bool,
    meter: Meter,
    attempts: usize,
    refusals: Vec<String>,
    messages: Vec<Received>,
}

impl Bot {
    fn new(config: Option<BotConfig>) -> Bot {
        Bot {
            config,
            fail_next: 0,
            fail_status: 500,
            throttle_next: 0,
            rate_limited: true,
            meter: Meter::default(),
            attempts: 0,
            refusals: Vec::new(),
            messages: Vec::new(),
        }
    }

    /// Steps 1 to 5 of the [module docs](self) for one request.
    fn decide(
        &mut self,
        contract: &Contract,
        req: &Inbound,
        now: DateTime<Utc>,
        clock: Instant,
    ) -> Result<Received, Answer> {
        let Some(config) = &self.config else {
            return Err(contract.unknown.clone());
        };
        if self.fail_next > 0 {
            self.fail_next -= 1;
            return Err(Answer::text(self.fail_status, "injected failure"));
        }
        if self.throttle_next > 0 {
            self.throttle_next -= 1;
            return Err(contract.throttled.clone());
        }
        let limit = contract.limit.filter(|_| self.rate_limited);
        if let Some(limit) = limit
            && self.meter.full(limit, clock)
        {
            return Err(contract.throttled.clone());
        }
        if req.method != Method::POST {
            return Err(Answer::text(405, "method not allowed"));
        }
        let accepted = (contract.judge)(req, config, now)?;
        if let Some(limit) = limit {
            self.meter.record(limit, clock);
        }
        Ok(Received {
            body: accepted.body,
            headers: req.headers.clone(),
            received_at: now,
            signed: accepted.signed,
        })
    }
}

async fn answer(
    state: Arc<State>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let answer = match Inbound::read(req).await {
        Ok(req) => state.receive(req, Utc::now(), Instant::now()),
        Err(too_large) => too_large,
    };
    Ok(answer.into_response())
}

/// Base64 of HMAC-SHA256 keyed with `key` over the concatenation of `message`.
pub(crate) fn hmac_base64(key: &[u8], message: &[&[u8]]) -> String {
    // HMAC takes keys of any length, so this cannot fail; an empty string, which matches no
    // signature, if it ever did.
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(key) else {
        return String::new();
    };
    message.iter().for_each(|part| mac.update(part));
    BASE64.encode(mac.finalize().into_bytes())
}

/// Every string in `value`, in document order (object members in key order).
pub(crate) fn strings(value: &Value) -> Vec<&str> {
    let mut found = Vec::new();
    let mut pending = vec![value];
    while let Some(next) = pending.pop() {
        match next {
            Value::String(s) => found.push(s.as_str()),
            Value::Array(items) => pending.extend(items.iter().rev()),
            Value::Object(members) => pending.extend(members.values().rev()),
            _ => {}
        }
    }
    found
}

/// `value[key]` when it is a non-empty string.
pub(crate) fn nonempty<'a>(value: &'a Value, key: &str) -> Option<&'a str> {
    value.get(key)?.as_str().filter(|s| !s.is_empty())
}

/// Whether `value` is absent, or an array of strings.
pub(crate) fn string_list(value: Option<&Value>) -> bool {
    value.is_none_or(|v| v.as_array().is_some_and(|a| a.iter().all(Value::is_string)))
}

#[cfg(test)]
pub(crate) mod testing {
    //! Helpers for the contracts' unit tests.

    use super::*;

    /// A POST of `body` to `target` (a path with an optional query) with `headers`.
    pub(crate) fn post(target: &str, headers: &[(&str, &str)], body: impl Into<Bytes>) -> Inbound {
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        let headers = headers
            .iter()
            .map(|(name, value)| (name.to_ascii_lowercase(), value.to_string()));
        Inbound {
            method: Method::POST,
            path: path.to_string(),
            query: query.to_string(),
            headers: headers.collect(),
            body: body.into(),
        }
    }

    pub(crate) use serde_json::json;

    /// A contract's unknown, throttle and acceptance answers, one line each: the status, the
    /// body, and `Retry-After` if any.
    pub(crate) fn fixed_answers(contract: Contract) -> [String; 3] {
        [contract.unknown, contract.throttled, contract.accepted].map(|a| {
            let retry = a.retry_after.map(|s| format!(" (Retry-After: {s})"));
            format!("{} {}{}", a.status, a.body, retry.unwrap_or_default())
        })
    }

    /// A verdict as one line: `accepted`, `accepted, signed`, or the refusal line.
    pub(crate) fn outcome(verdict: Verdict) -> String {
        match verdict {
            Ok(Accepted { signed: true, .. }) => "accepted, signed".into(),
            Ok(_) => "accepted".into(),
            Err(refusal) => refusal.summary,
        }
    }

    /// `unix_seconds` as a time.
    pub(crate) fn at(unix_seconds: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(unix_seconds, 0).expect("a valid time")
    }
}

#[cfg(test)]
mod tests {
    use super::testing::post;
    use super::*;

    use hyper_util::client::legacy::Client;
    use hyper_util::rt::TokioExecutor;

    const WAIT: Duration = Duration::from_secs(5);
    const BOT: &str = "bot-1";

    /// A WeCom text message: the simplest body any of the services accepts.
    fn wecom_text(target: &str, content: &str) -> Inbound {
        let body = json!({ "msgtype": "text", "text": { "content": content } });
        post(
            target,
            &[("content-type", "application/json")],
            body.to_string(),
        )
    }

    /// Feeds requests built by `req` to `chat` at the given offsets from one instant, as if
    /// they arrived then, and returns the refusal line (or `accepted`) of each.
    fn feed(chat: &ChatReceiver, offsets_ms: &[u64], req: impl Fn() -> Inbound) -> Vec<String> {
        let start = Instant::now();
        let lines = offsets_ms.iter().map(|&ms| {
            let clock = start + Duration::from_millis(ms);
            let answer = chat.state.receive(req(), Utc::now(), clock);
            let accepted = answer == chat.state.contract.accepted;
            if accepted {
                "accepted".into()
            } else {
                answer.summary
            }
        });
        lines.collect()
    }

    fn path_of(url: &str) -> &str {
        let after_scheme = url.strip_prefix("http://").expect("an http URL");
        &after_scheme[after_scheme.find('/').expect("a path")..]
    }

    #[test]
    fn urls_carry_the_token_where_each_service_wants_it() {
        let addr: SocketAddr = "127.0.0.1:4000".parse().expect("an address");
        let expected = [
            (Provider::DingTalk, "/robot/send?access_token=t%2B1"),
            (Provider::WeCom, "/cgi-bin/webhook/send?key=t%2B1"),
            (Provider::Slack, "/services/T0JOBRELAY/B0JOBRELAY/t+1"),
            (Provider::Webhook, "/hooks/t+1"),
        ];
        for (provider, tail) in expected {
            let route = provider.contract().route;
            let url = route.url(addr, "t+1");
            assert_eq!(url, format!("http://127.0.0.1:4000{tail}"));
            let token = route.token(&post(path_of(&url), &[], ""));
            assert_eq!(token.as_deref(), Some("t+1"), "{provider}");
        }
    }

    #[test]
    fn requests_addressing_no_bot_have_no_token() {
        let dingtalk = Provider::DingTalk.contract().route;
        let slack = Provider::Slack.contract().route;
        for (route, target) in [
            (&dingtalk, "/robot/send"),
            (&dingtalk, "/robot/send?access_token="),
            (&dingtalk, "/robot/other?access_token=x"),
            (&slack, "/services/T0JOBRELAY/B0JOBRELAY/"),
            (&slack, "/services/T0JOBRELAY/B0JOBRELAY/x/y"),
            (&slack, "/services/TOTHER/B0JOBRELAY/x"),
        ] {
            assert_eq!(route.token(&post(target, &[], "")), None, "{target}");
        }
    }

    #[tokio::test]
    async fn faults_come_first_in_order_and_everything_is_counted() {
        let chat = ChatReceiver::start(Provider::WeCom).await.expect("starts");
        let url = chat.add_bot(BOT, None);
        let target = path_of(&url).to_string();
        chat.fail_next(BOT, 1, 503);
        chat.throttle_next(BOT, 1);
        let mut get = wecom_text(&target, "hi");
        get.method = Method::GET;
        let send = |req| chat.state.receive(req, Utc::now(), Instant::now()).summary;
        let lines = [
            send(wecom_text(&target, "hi")),
            send(wecom_text(&target, "hi")),
            send(get),
            send(wecom_text(&target, "")),
            send(wecom_text(&target, "job-7")),
        ];
        assert_eq!(lines[4], "errcode 0: ok");
        let refusals = [
            "HTTP 503: injected failure",
            "errcode 45009: api freq out of limit",
            "HTTP 405: method not allowed",
            "errcode 44004: empty content",
        ];
        assert_eq!(lines[..4], refusals);
        assert_eq!(chat.refusals(BOT), refusals);
        assert_eq!(chat.attempts(BOT), 5);
        assert_eq!(chat.messages(BOT)[0].text(), "text\njob-7");
    }

    #[tokio::test]
    async fn an_unknown_token_is_counted_until_it_is_added() {
        let chat = ChatReceiver::start(Provider::WeCom).await.expect("starts");
        let target = path_of(&chat.url(BOT)).to_string();
        chat.throttle_next(BOT, 5);
        let lines = feed(&chat, &[0], || wecom_text(&target, "hi"));
        assert_eq!(lines, ["errcode 93000: invalid webhook url"]);
        assert_eq!(chat.attempts(BOT), 1);
        assert_eq!(chat.refusals(BOT), ["errcode 93000: invalid webhook url"]);

        chat.add_bot(BOT, None);
        assert_eq!((chat.attempts(BOT), chat.refusals(BOT).len()), (0, 0));
        let lines = feed(&chat, &[0], || wecom_text(&target, "hi"));
        assert_eq!(
            lines,
            ["accepted"],
            "the throttle set before did not carry over"
        );
    }

    #[tokio::test]
    async fn a_window_limit_counts_accepted_messages_only() {
        let chat = ChatReceiver::start(Provider::DingTalk)
            .await
            .expect("starts");
        let target = path_of(&chat.add_bot(BOT, None)).to_string();
        let text = json!({ "msgtype": "text", "text": { "content": "x" } }).to_string();
        let good = || post(&target, &[], text.clone());
        // 20 within the minute pass, the 21st does not; a refused request takes no quota.
        let mut offsets: Vec<u64> = (0..20).map(|i| i * 1000).collect();
        offsets.extend([30_000, 59_999, 60_000]);
        let lines = feed(&chat, &offsets, good);
        let too_fast = "errcode 130101: send too fast, exceed 20 times per minute";
        assert!(lines[..20].iter().all(|l| l == "accepted"), "{lines:?}");
        assert_eq!(lines[20..], [too_fast, too_fast, "accepted"]);

        chat.set_rate_limit(BOT, false);
        assert!(feed(&chat, &[0; 30], good).iter().all(|l| l == "accepted"));
    }

    #[tokio::test]
    async fn a_bucket_limit_allows_a_burst_then_one_a_second() {
        let chat = ChatReceiver::start(Provider::Slack).await.expect("starts");
        let target = path_of(&chat.add_bot(BOT, None)).to_string();
        let good = || {
            post(
                &target,
                &[("content-type", "application/json")],
                r#"{"text":"x"}"#,
            )
        };
        let lines = feed(
            &chat,
            &[0, 0, 0, 0, 999, 1000, 1001, 2000, 5000, 5000, 5000, 5000],
            good,
        );
        let (ok, limited) = ("accepted", "HTTP 429: rate_limited");
        let expected = [
            ok, ok, ok, limited, limited, ok, limited, ok, ok, ok, ok, limited,
        ];
        assert_eq!(lines, expected);
    }

    #[tokio::test]
    async fn wait_for_messages_times_out_saying_what_happened() {
        let chat = ChatReceiver::start(Provider::WeCom).await.expect("starts");
        let target = path_of(&chat.add_bot(BOT, None)).to_string();
        feed(&chat, &[0, 1], || wecom_text(&target, "one"));
        chat.set_keyword(BOT, "ignored by WeCom");
        feed(&chat, &[2], || wecom_text(&target, ""));
        let got = chat
            .wait_for_messages(BOT, 2, WAIT)
            .await
            .expect("two arrived");
        assert_eq!(got.len(), 2);
        let error = chat
            .wait_for_messages(BOT, 3, Duration::from_millis(50))
            .await
            .expect_err("no third message");
        let error = error.to_string();
        assert!(error.contains("2 of 3 messages"), "{error}");
        assert!(
            error.contains("3 requests; last refusal: errcode 44004"),
            "{error}"
        );
    }

    /// A request for [`round_trip`]: a URL, extra headers and a body.
    struct Req {
        url: String,
        headers: Vec<(&'static str, String)>,
        body: String,
    }

    impl Req {
        fn json(url: String, body: &Value) -> Req {
            let headers = vec![("content-type", "application/json".to_string())];
            Req {
                url,
                headers,
                body: body.to_string(),
            }
        }

        /// Sends it; the status, the `Retry-After` header and the body.
        async fn send(&self) -> (u16, Option<String>, String) {
            let client = Client::builder(TokioExecutor::new()).build_http();
            let mut request = Request::post(&self.url);
            for (name, value) in &self.headers {
                request = request.header(*name, value);
            }
            let request = request.body(Full::new(Bytes::from(self.body.clone())));
            let response = client
                .request(request.expect("a request"))
                .await
                .expect("sent");
            let retry = response
                .headers()
                .get(RETRY_AFTER)
                .map(|v| v.to_str().unwrap_or("?"));
            let retry = retry.map(str::to_string);
            let status = response.status().as_u16();
            let body = response
                .into_body()
                .collect()
                .await
                .expect("an answer")
                .to_bytes();
            (status, retry, String::from_utf8_lossy(&body).into_owned())
        }
    }

    /// One service's part of [`round_trip`]: a request it accepts (its text mentions `job-7`),
    /// and one it refuses with the line `refusal` starts.
    struct Script {
        good: Req,
        bad: Req,
        refusal: &'static str,
    }

    /// Over real HTTP: a good request gets the service's acceptance and is recorded, a
    /// throttled one gets the service's throttle answer (status, body and `Retry-After`), a bad
    /// one is refused and listed; after shutdown nothing answers.
    async fn round_trip(provider: Provider, script: impl FnOnce(&ChatReceiver) -> Script) {
        let chat = ChatReceiver::start(provider).await.expect("starts");
        let Script { good, bad, refusal } = script(&chat);
        let wire = |a: &Answer| {
            (
                a.status,
                a.retry_after.map(|s| s.to_string()),
                a.body.clone(),
            )
        };
        assert_eq!(good.send().await, wire(&chat.state.contract.accepted));
        let got = chat.wait_for_messages(BOT, 1, WAIT).await;
        let got = got.expect("accepted");
        assert!(got[0].text().contains("job-7"), "{:?}", got[0]);

        chat.throttle_next(BOT, 1);
        assert_eq!(good.send().await, wire(&chat.state.contract.throttled));

        let answer = bad.send().await;
        let refusals = chat.refusals(BOT);
        assert_eq!(refusals.len(), 2, "{refusals:?}");
        assert!(refusals[1].starts_with(refusal), "{refusals:?} {answer:?}");
        assert_eq!((chat.attempts(BOT), chat.messages(BOT).len()), (3, 1));
        chat.shutdown();
        let after = Req::json(chat.url(BOT), &json!({}));
        assert!(after.send_fails().await, "shut down");
    }

    impl Req {
        async fn send_fails(&self) -> bool {
            let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
            let request = Request::post(&self.url).body(Full::new(Bytes::new()));
            client.request(request.expect("a request")).await.is_err()
        }
    }

    #[tokio::test]
    async fn dingtalk_over_http() {
        round_trip(Provider::DingTalk, |chat| {
            let url = chat.add_bot(BOT, Some("SEC-d"));
            let now = Utc::now().timestamp_millis();
            let signed = |secret: &str| {
                let sign = dingtalk::sign(now, secret);
                let sign: String = form_urlencoded::byte_serialize(sign.as_bytes()).collect();
                format!("{url}&timestamp={now}&sign={sign}")
            };
            let message = json!({ "msgtype": "markdown", "markdown": {
                "title": "train", "text": "**job-7** succeeded" } });
            Script {
                good: Req::json(signed("SEC-d"), &message),
                bad: Req::json(signed("SEC-wrong"), &message),
                refusal: "errcode 310000: sign not match",
            }
        })
        .await;
    }

    #[tokio::test]
    async fn wecom_over_http() {
        round_trip(Provider::WeCom, |chat| {
            let url = chat.add_bot(BOT, Some("ignored"));
            let text = |content: &str| json!({ "msgtype": "text", "text": { "content": content } });
            Script {
                good: Req::json(url.clone(), &text("job-7 failed")),
                bad: Req::json(url, &text(&"x".repeat(2049))),
                refusal: "errcode 40058: invalid Request Parameter",
            }
        })
        .await;
    }

    #[tokio::test]
    async fn slack_over_http() {
        round_trip(Provider::Slack, |chat| {
            let url = chat.add_bot(BOT, None);
            let header = |text: &str| {
                json!({ "blocks": [
                { "type": "header", "text": { "type": "plain_text", "text": text } } ] })
            };
            Script {
                good: Req::json(url.clone(), &header("job-7 succeeded")),
                bad: Req::json(url, &header(&"x".repeat(151))),
                refusal: "HTTP 400: invalid_blocks (blocks[0].text.text",
            }
        })
        .await;
    }

    #[tokio::test]
    async fn webhook_over_http() {
        round_trip(Provider::Webhook, |chat| {
            let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
            let url = chat.add_bot(BOT, Some(secret));
            let event = json!({ "specversion": "1.0", "id": "e-1", "source": "/jobrelay",
                "type": "io.jobrelay.job.succeeded", "subject": "job-7" });
            let body = event.to_string();
            let now = Utc::now().timestamp();
            let signed = |key: &str| {
                let signature = webhook::sign("msg-1", now, body.as_bytes(), key);
                let headers = [
                    ("content-type", "application/cloudevents+json".to_string()),
                    ("webhook-id", "msg-1".to_string()),
                    ("webhook-timestamp", now.to_string()),
                    ("webhook-signature", signature.expect("a valid secret")),
                ];
                Req {
                    url: url.clone(),
                    headers: headers.into(),
                    body: body.clone(),
                }
            };
            Script {
                good: signed(secret),
                bad: signed("whsec_d3Jvbmc="),
                refusal: "HTTP 401: bad signature",
            }
        })
        .await;
    }
}
