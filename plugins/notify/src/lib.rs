//! The notifier core shared by jobrelay's chat plugins (Feishu, DingTalk, WeCom, Slack).
//!
//! Every chat notifier does the same things around one provider-specific step: check the
//! manifest's config once in `init` ([`config`]), decide whether an event is worth a message (a
//! configured phase, actually reached now), pick the bot (routes by namespace and label, else
//! the default webhook), make sure a transition is announced once ([`SentLog`], keyed by the
//! event's transition key), POST through `wasi:http`, and map the answer onto delivered, `retry`
//! or `give-up` ([`answer`]) without a webhook token or secret in any message. A provider adds
//! only what differs ([`Provider`]): its own keys, its body and signature, and its answer codes.
//! A plugin is then one type and one line, [`export_notifier!`].
//!
//! Every module but this file's glue is plain Rust over the guest crate's types, unit-tested on
//! the host target without building a component.

pub mod answer;
pub mod config;
pub mod duration;
pub mod job;
pub mod message;
pub mod template;
pub mod webhook;

use std::time::{SystemTime, UNIX_EPOCH};

pub use jobrelay_guest;
use jobrelay_guest::log::{self as host_log, Level};
use jobrelay_guest::{HandlerError, JobEvent, http, kv, phase_name};

use crate::answer::{Outcome, Transport};
use crate::config::{Keys, Settings, Target};

/// How long a sent transition is remembered: longer than any retry schedule or host downtime
/// worth deduplicating across, short enough that the store does not grow without bound.
const SENT_TTL_SECONDS: u32 = 7 * 24 * 3600;

/// Services' answers are tiny; anything longer is not worth holding, and what was read still
/// classifies (a cut answer simply has no parsable code).
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// One request to a service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    /// The whole URL, credentials and signature included: never logged.
    pub url: String,
    /// JSON.
    pub body: Vec<u8>,
}

/// What a chat service adds to the core.
pub trait Provider: Sized + Send + Sync + 'static {
    /// The service's name in messages: `DingTalk`.
    const SERVICE: &'static str;
    /// The keys it understands beyond the common ones.
    const KEYS: Keys;

    /// Checks the provider's own keys (`settings.own`) once, in `init`.
    fn new(settings: &Settings) -> Result<Self, String>;

    /// The request announcing `job` to `target`, signed at `now_ms` (unix milliseconds) when
    /// the target has a secret. An error gives the event up.
    fn request(
        &self,
        job: &JobEvent,
        settings: &Settings,
        target: &Target,
        now_ms: i64,
    ) -> Result<Outgoing, String>;

    /// What an HTTP answer means; the message need not name the bot (the core adds it).
    fn classify(&self, status: u16, body: &[u8]) -> Outcome;
}

/// A provider with its checked settings: what `init` keeps for `handle`.
pub struct Notifier<P> {
    pub settings: Settings,
    pub provider: P,
}

impl<P: Provider> Notifier<P> {
    pub fn from_config(config: &[(String, String)]) -> Result<Notifier<P>, String> {
        let settings = Settings::from_config(config, &P::KEYS)?;
        let provider = P::new(&settings)?;
        Ok(Notifier { settings, provider })
    }

    /// Handles one event: skipped, sent (once per transition), retried or given up.
    pub fn handle(&self, job: &JobEvent) -> Result<(), HandlerError> {
        let subject = format!("{} {}/{}", job.kind, job.namespace, job.name);
        if !self.settings.wants(job) {
            host_log::write(
                Level::Debug,
                &format!(
                    "{subject}: {} is not a notified transition",
                    phase_name(job.phase)
                ),
            );
            return Ok(());
        }
        let Some(target) = self.settings.target_for(job) else {
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
                &format!("{subject}: message for this transition already sent; skipped"),
            );
            return Ok(());
        }
        let bot = format!("{} bot {}", P::SERVICE, target.webhook.redacted());
        match self.deliver(job, target) {
            Outcome::Delivered => {
                sent.record(&key);
                host_log::write(
                    Level::Info,
                    &format!("{subject}: {} message sent to {bot}", phase_name(job.phase)),
                );
                Ok(())
            }
            Outcome::Retry(message) => {
                let message = target.scrub(&format!("{bot}: {message}"));
                host_log::write(Level::Warn, &message);
                Err(HandlerError::Retry(message))
            }
            Outcome::GiveUp(message) => {
                let message = target.scrub(&format!("{bot}: {message}"));
                host_log::write(Level::Error, &message);
                Err(HandlerError::GiveUp(message))
            }
        }
    }

    fn deliver(&self, job: &JobEvent, target: &Target) -> Outcome {
        let request = match self
            .provider
            .request(job, &self.settings, target, now_millis())
        {
            Ok(request) => request,
            Err(e) => return Outcome::GiveUp(e),
        };
        match post(&request) {
            Ok(answer) => self.provider.classify(answer.status, &answer.body),
            Err(transport) => answer::no_answer(transport, P::SERVICE),
        }
    }
}

/// POSTs the body as JSON.
fn post(request: &Outgoing) -> Result<http::Response, Transport> {
    let outgoing = http::Request {
        headers: vec![("content-type", b"application/json")],
        body: &request.body,
        max_response_bytes: MAX_ANSWER_BYTES,
        ..http::Request::new(http::Method::Post, &request.url)
    };
    http::send(&outgoing).map_err(|e| match e {
        http::HttpError::Denied => Transport::Denied,
        http::HttpError::InvalidUrl(why) | http::HttpError::Failed(why) => Transport::Failed(why),
    })
}

/// Unix milliseconds from the WASI wall clock.
fn now_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The kv store as this call may use it: once-per-transition is best effort, so a store that
/// is not granted or failing costs one warning and the message still goes out.
pub struct SentLog {
    usable: bool,
    warned: bool,
}

impl SentLog {
    pub fn new() -> SentLog {
        SentLog {
            usable: true,
            warned: false,
        }
    }

    /// Whether `key` says the message was already posted.
    pub fn already_sent(&mut self, key: &str) -> bool {
        match kv::get(key) {
            Ok(found) => found.is_some(),
            Err(e) => {
                self.unavailable(&e);
                false
            }
        }
    }

    pub fn record(&mut self, key: &str) {
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

impl Default for SentLog {
    fn default() -> SentLog {
        SentLog::new()
    }
}

/// Makes a plugin of a [`Provider`]: keeps its [`Notifier`] from `init` and exports the
/// contract's functions.
#[macro_export]
macro_rules! export_notifier {
    ($provider:ty) => {
        static NOTIFIER: $crate::jobrelay_guest::Configured<
            ::std::sync::Arc<$crate::Notifier<$provider>>,
        > = $crate::jobrelay_guest::Configured::new();

        struct Plugin;

        impl $crate::jobrelay_guest::Guest for Plugin {
            fn init(config: Vec<(String, String)>) -> Result<(), String> {
                NOTIFIER.set(::std::sync::Arc::new(
                    $crate::Notifier::<$provider>::from_config(&config)?,
                ))
            }

            fn handle(
                job: $crate::jobrelay_guest::JobEvent,
            ) -> Result<(), $crate::jobrelay_guest::HandlerError> {
                NOTIFIER.get()?.handle(&job)
            }
        }

        $crate::jobrelay_guest::export_plugin!(Plugin);
    };
}
