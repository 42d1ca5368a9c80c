//! `feishu-notify`: posts a card to a Feishu (Lark) custom bot when a job changes phase.
//!
//! Meant for `delivery: transitions`: each call gets one event; the plugin decides whether it is
//! worth a card (a configured phase, actually reached now), picks the bot (routes by namespace
//! and label, else the default webhook), builds a signed card that fits Feishu's 20 KB limit,
//! POSTs it through `wasi:http`, and maps Feishu's answer onto `retry` or `give-up`.
//!
//! Sent transitions are remembered in the host's kv store under `sent/<transition key>` for a
//! week, so a transition delivered again (after a host restart, as a reconstruction of one that
//! was delivered live, or when the host retries a call whose card was posted but whose answer
//! was lost) does not post a second card.
//!
//! The logic lives in modules that never touch the host (`config`, `card`, `response`, ...) so
//! it is unit-tested natively; this file is only the glue between them and the imports.

mod card;
mod config;
mod duration;
mod job;
mod response;
mod sign;
mod template;
mod webhook;

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use jobrelay_guest::log::{self as host_log, Level};
use jobrelay_guest::{Configured, Guest, HandlerError, JobEvent, kv, phase_name};

use crate::card::Signature;
use crate::config::{Settings, Target};
use crate::response::{Outcome, Transport};
use crate::webhook::Webhook;
use jobrelay_guest::http;

/// How long a sent event is remembered: longer than any retry schedule or host downtime worth
/// deduplicating across, short enough that the store does not grow without bound.
const SENT_TTL_SECONDS: u32 = 7 * 24 * 3600;

/// Settings from `init`, which the host always calls before `handle` on an instance.
static SETTINGS: Configured<Arc<Settings>> = Configured::new();

/// The kv store as this call may use it: dedup is best effort, so a store that is not granted
/// or failing costs one warning and the notification still goes out.
struct SentLog {
    usable: bool,
    warned: bool,
}

impl SentLog {
    fn new() -> SentLog {
        SentLog {
            usable: true,
            warned: false,
        }
    }

    /// Whether `key` says the card was already posted.
    fn already_sent(&mut self, key: &str) -> bool {
        match kv::get(key) {
            Ok(found) => found.is_some(),
            Err(e) => {
                self.unavailable(&e);
                false
            }
        }
    }

    fn record(&mut self, key: &str) {
        if !self.usable {
            return;
        }
        if let Err(e) = kv::set(key, b"1", Some(SENT_TTL_SECONDS)) {
            self.unavailable(&e);
        }
    }

    fn unavailable(&mut self, error: &str) {
        self.usable = false;
        if !self.warned {
            self.warned = true;
            host_log::write(
                Level::Warn,
                &format!(
                    "kv store unavailable ({error}); sending without duplicate protection \
                     (grant it with `grants.kv: true`)"
                ),
            );
        }
    }
}

/// Unix seconds from the WASI wall clock.
fn now_seconds() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// Feishu's answers are tiny; anything longer is not worth holding, and what was read still
/// classifies (a cut answer simply has no parsable `code`).
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// POSTs the card as JSON to the bot.
fn post(webhook: &Webhook, body: &[u8]) -> Result<http::Response, Transport> {
    let url = format!(
        "{}://{}{}",
        webhook.scheme.as_str(),
        webhook.authority,
        webhook.path_with_query
    );
    let request = http::Request {
        headers: vec![("content-type", b"application/json")],
        body,
        max_response_bytes: MAX_ANSWER_BYTES,
        ..http::Request::new(http::Method::Post, &url)
    };
    http::send(&request).map_err(|e| match e {
        http::HttpError::Denied => Transport::Denied,
        http::HttpError::InvalidUrl(why) | http::HttpError::Failed(why) => Transport::Failed(why),
    })
}

/// Builds, signs and posts the card; the outcome's messages are already scrubbed.
fn deliver(job: &JobEvent, settings: &Settings, target: &Target) -> Outcome {
    let signature = target.secret.as_deref().map(|secret| {
        let timestamp = now_seconds();
        Signature {
            timestamp,
            sign: sign::sign(timestamp, secret),
        }
    });
    let body = match card::body(job, settings, signature.as_ref()) {
        Ok(body) => body,
        Err(e) => return Outcome::GiveUp(e),
    };
    let answer = post(&target.webhook, &body);
    let outcome = response::classify(
        answer
            .as_ref()
            .map(|answer| (answer.status, answer.body.as_slice()))
            .map_err(Clone::clone),
    );
    let bot = target.webhook.redacted();
    match outcome {
        Outcome::Delivered => Outcome::Delivered,
        Outcome::Retry(m) => Outcome::Retry(target.scrub(&format!("Feishu bot {bot}: {m}"))),
        Outcome::GiveUp(m) => Outcome::GiveUp(target.scrub(&format!("Feishu bot {bot}: {m}"))),
    }
}

struct FeishuNotify;

impl Guest for FeishuNotify {
    fn init(config: Vec<(String, String)>) -> Result<(), String> {
        SETTINGS.set(Arc::new(Settings::from_config(&config)?))
    }

    fn handle(job: JobEvent) -> Result<(), HandlerError> {
        let settings = SETTINGS.get()?;
        let subject = format!("{} {}/{}", job.kind, job.namespace, job.name);

        if !settings.wants(&job) {
            host_log::write(
                Level::Debug,
                &format!(
                    "{subject}: {} is not a notified transition",
                    phase_name(job.phase)
                ),
            );
            return Ok(());
        }
        let Some(target) = settings.target_for(&job) else {
            host_log::write(
                Level::Debug,
                &format!("{subject}: no route matches and no default webhook; skipped"),
            );
            return Ok(());
        };

        let key = format!("sent/{}", job.transition_key);
        let mut sent = SentLog::new();
        if sent.already_sent(&key) {
            host_log::write(
                Level::Debug,
                &format!("{subject}: card for this transition already sent; skipped"),
            );
            return Ok(());
        }

        match deliver(&job, &settings, target) {
            Outcome::Delivered => {
                sent.record(&key);
                host_log::write(
                    Level::Info,
                    &format!(
                        "{subject}: {} card sent to Feishu bot {}",
                        phase_name(job.phase),
                        target.webhook.redacted()
                    ),
                );
                Ok(())
            }
            Outcome::Retry(message) => {
                host_log::write(Level::Warn, &message);
                Err(HandlerError::Retry(message))
            }
            Outcome::GiveUp(message) => {
                host_log::write(Level::Error, &message);
                Err(HandlerError::GiveUp(message))
            }
        }
    }
}

jobrelay_guest::export_plugin!(FeishuNotify);
