//! The notifier core shared by jobrelay's chat plugins (Feishu, DingTalk, WeCom, Slack).
//!
//! Every chat notifier does the same things around one provider-specific step: check the
//! manifest's config once in `init` ([`config`]), decide whether an event is worth a message (a
//! configured phase, actually reached now), pick the bot (routes by namespace and label, else
//! the default webhook), make sure a transition is announced once ([`SentLog`], keyed by the
//! event's transition key), POST through `wasi:http`, and map the answer onto delivered,
//! throttled (deferred to the service's `Retry-After` or the provider's own wait: not a
//! failure, no retry attempt spent), `retry` or `give-up` ([`answer`]), without a webhook token
//! or secret in any message. A provider adds
//! only what differs ([`Provider`]): its own keys, its body and signature, and its answer codes.
//! A plugin is then one type and one line, [`export_notifier!`].
//!
//! Fleet events (a cluster offline or back online, a fleet rule firing or resolved; only for a
//! manifest that lists `fleet_events`) take the same path from the bot on: the default bot
//! (`webhook`; without one they are skipped with a warning), once per event id (`sent/fleet/`
//! in the kv store), held through quiet hours, signed, throttling deferred and failures retried
//! or given up as for a job's message. They are never put in a digest, and `phases`, `title`,
//! `link.*` and routes, made of a job's fields, do not apply ([`fleet`]).
//!
//! Text from the cluster goes into a message only through its service's neutraliser
//! ([`markup`]), so it shows as written and can neither mention, link nor format.
//!
//! Every module but this file's glue is plain Rust over the guest crate's types, unit-tested on
//! the host target without building a component.

pub mod answer;
pub mod config;
pub mod duration;
pub mod fleet;
#[cfg(feature = "hostile")]
pub mod hostile;
pub mod job;
pub mod markup;
pub mod message;
pub mod noise;
pub mod template;
pub mod testing;
pub mod webhook;

use std::time::{SystemTime, UNIX_EPOCH};

pub use jobrelay_guest;
use jobrelay_guest::log::{self as host_log, Level};
use jobrelay_guest::{
    FleetEvent, HandlerError, JobEvent, deferral, fleet_kind_name, http, kv, phase_name,
};

use crate::answer::{Outcome, Transport};
use crate::config::{Keys, Settings, Target};
use crate::message::Message;
use crate::noise::{Decision, Pending, Window};

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

/// What a message is about.
#[derive(Debug, Clone, Copy)]
pub enum Subject<'a> {
    /// One job's transition.
    Job(&'a JobEvent),
    /// Several jobs of one namespace and phase: a digest window's message.
    Digest(&'a Message),
    /// A cluster's health or a fleet rule changed.
    Fleet(&'a FleetEvent),
}

impl Subject<'_> {
    /// The message to lay out.
    pub fn message(&self, settings: &Settings) -> Message {
        match self {
            Subject::Job(job) => Message::of(job, settings),
            Subject::Digest(message) => (*message).clone(),
            Subject::Fleet(event) => Message::fleet(event, settings),
        }
    }
}

/// What a chat service adds to the core.
pub trait Provider: Sized + Send + Sync + 'static {
    /// The service's name in messages: `DingTalk`.
    const SERVICE: &'static str;
    /// The keys it understands beyond the common ones.
    const KEYS: Keys;
    /// How long a throttled message waits when the answer says no `Retry-After`: about what
    /// the service's limit takes to let one more through.
    const THROTTLE_SECONDS: u32;

    /// Checks the provider's own keys (`settings.own`) once, in `init`.
    fn new(settings: &Settings) -> Result<Self, String>;

    /// The request announcing `subject` to `target`, signed at `now_ms` (unix milliseconds)
    /// when the target has a secret. An error gives the event up.
    fn request(
        &self,
        subject: Subject<'_>,
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
        let Some((bot_name, target)) = self.settings.named_target_for(job) else {
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
        let now = now_millis();
        let noise = self.settings.noise;
        // The digest window of this bot, namespace and phase, when digests are on and the
        // store can keep it; without one, every transition goes on its own.
        let digest = noise.digest_seconds.and_then(|seconds| {
            let digests = Digests::new(&bot_name, job);
            digests.load().map(|window| (seconds, digests, window))
        });
        let pending = || Pending {
            key: job.transition_key.clone(),
            line: Message::line(job),
        };
        if let Some(left) = noise.quiet.and_then(|quiet| quiet.seconds_left(now)) {
            if let Some((window_seconds, digests, mut window)) = digest {
                // Listed, so the end of the quiet period brings one digest.
                window.hold(pending());
                digests.store(&window, window_seconds);
            }
            return defer(left, &format!("{subject}: quiet hours, {left} s left"));
        }
        let Some((window_seconds, digests, mut window)) = digest else {
            return self.send(&subject, Subject::Job(job), target, &[key], &mut sent);
        };
        let pending = pending();
        let batch = match window.decide(now, window_seconds, pending.clone()) {
            Decision::Hold { seconds } => {
                digests.store(&window, window_seconds);
                return defer(
                    seconds,
                    &format!("{subject}: digest window, {seconds} s left"),
                );
            }
            Decision::Send { batch } => batch,
        };
        let keys: Vec<String> = batch.iter().map(|p| format!("sent/{}", p.key)).collect();
        let included = batch.iter().any(|p| p.key == pending.key);
        let handled = if batch.len() == 1 && included {
            self.send(&subject, Subject::Job(job), target, &keys, &mut sent)
        } else {
            let lines: Vec<String> = batch.iter().map(|p| p.line.clone()).collect();
            let digest = Message::digest(job, &lines, &self.settings);
            self.send(&subject, Subject::Digest(&digest), target, &keys, &mut sent)
        };
        handled?;
        window.sent(now, &batch);
        if !included {
            // The list was full: this one waits for the next window.
            window.hold(pending);
            digests.store(&window, window_seconds);
            return defer(
                window_seconds,
                &format!("{subject}: digest full, waiting for the next window"),
            );
        }
        digests.store(&window, window_seconds);
        Ok(())
    }

    /// Handles one fleet event: sent to the default bot once per event id (held through quiet
    /// hours), retried or given up; skipped without a default bot.
    pub fn handle_fleet(&self, event: &FleetEvent) -> Result<(), HandlerError> {
        let about = format!(
            "fleet event {} ({} on {})",
            event.id,
            fleet_kind_name(event.kind),
            event.cluster
        );
        let Some(target) = self.settings.fleet_target() else {
            host_log::write(
                Level::Warn,
                &format!(
                    "{about}: fleet events go to the bot of `webhook`, which is not set; skipped"
                ),
            );
            return Ok(());
        };
        let key = format!("sent/fleet/{}", event.id);
        let mut sent = SentLog::new();
        if sent.already_sent(&key) {
            host_log::write(
                Level::Debug,
                &format!("{about}: message already sent; skipped"),
            );
            return Ok(());
        }
        if let Some(left) = self
            .settings
            .noise
            .quiet
            .and_then(|quiet| quiet.seconds_left(now_millis()))
        {
            return defer(left, &format!("{about}: quiet hours, {left} s left"));
        }
        self.send(&about, Subject::Fleet(event), target, &[key], &mut sent)
    }

    /// Sends one message about `about` (for the log); on success records every key in `keys`
    /// as sent.
    fn send(
        &self,
        about: &str,
        subject: Subject<'_>,
        target: &Target,
        keys: &[String],
        sent: &mut SentLog,
    ) -> Result<(), HandlerError> {
        let bot = format!("{} bot {}", P::SERVICE, target.webhook.redacted());
        let (outcome, asked_wait) = self.deliver(subject, target);
        match outcome {
            Outcome::Delivered => {
                for key in keys {
                    sent.record(key);
                }
                let what = match subject {
                    Subject::Job(job) => format!("{} message", phase_name(job.phase)),
                    Subject::Digest(_) => format!("digest of {} jobs", keys.len()),
                    Subject::Fleet(_) => "message".to_string(),
                };
                host_log::write(Level::Info, &format!("{about}: {what} sent to {bot}"));
                Ok(())
            }
            Outcome::Throttled(message) => {
                let seconds = asked_wait.unwrap_or(P::THROTTLE_SECONDS);
                let message = target.scrub(&format!("{bot}: {message}; again in {seconds} s"));
                host_log::write(Level::Info, &message);
                defer(seconds, &message)
            }
            // Not logged here: the host logs each retry (a warning) and each dead letter
            // (an error) with this very message, so saying it here too would say it twice.
            Outcome::Retry(message) => Err(HandlerError::Retry(
                target.scrub(&format!("{bot}: {message}")),
            )),
            Outcome::GiveUp(message) => Err(HandlerError::GiveUp(
                target.scrub(&format!("{bot}: {message}")),
            )),
        }
    }

    /// One attempt, and the wait the answer asked for (`Retry-After`), if any.
    fn deliver(&self, subject: Subject<'_>, target: &Target) -> (Outcome, Option<u32>) {
        let request = match self
            .provider
            .request(subject, &self.settings, target, now_millis())
        {
            Ok(request) => request,
            Err(e) => return (Outcome::GiveUp(e), None),
        };
        match post(&request) {
            Ok(answer) => (
                self.provider.classify(answer.status, &answer.body),
                answer::retry_after(answer.header("retry-after")),
            ),
            Err(transport) => (answer::no_answer(transport, P::SERVICE), None),
        }
    }
}

/// Asks the host for this event again after `seconds`: a deferral, not a failure.
fn defer(seconds: u32, why: &str) -> Result<(), HandlerError> {
    deferral::defer(seconds);
    host_log::write(Level::Debug, why);
    Err(HandlerError::Retry(why.to_string()))
}

/// The digest window of one bot × namespace × phase in the kv store (a digest goes to one
/// bot, so jobs routed to different bots are never listed together). Like [`SentLog`], best effort:
/// without a store (not granted, failing) every transition goes on its own, with one warning.
struct Digests {
    key: String,
}

impl Digests {
    fn new(bot: &str, job: &JobEvent) -> Digests {
        Digests {
            key: format!("digest/{bot}/{}/{}", job.namespace, phase_name(job.phase)),
        }
    }

    fn load(&self) -> Option<Window> {
        match kv::get(&self.key) {
            Ok(None) => Some(Window::default()),
            // A window that no longer reads (written by another version) starts afresh.
            Ok(Some(bytes)) => Some(serde_json::from_slice(&bytes).unwrap_or_default()),
            Err(e) => {
                host_log::write(
                    Level::Warn,
                    &format!(
                        "kv store unavailable ({e}); sending without a digest \
                         (grant it with `grants.kv: true`)"
                    ),
                );
                None
            }
        }
    }

    /// Keeps the window for a day past its length: long enough for every held event to come
    /// back, short enough that a namespace gone quiet leaves nothing behind.
    fn store(&self, window: &Window, window_seconds: u32) {
        let ttl = window_seconds.saturating_mul(2).saturating_add(86_400);
        let bytes = serde_json::to_vec(window).unwrap_or_default();
        if let Err(e) = kv::set(&self.key, &bytes, Some(ttl)) {
            host_log::write(Level::Warn, &format!("digest window not stored: {e}"));
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

            fn handle_fleet(
                event: $crate::jobrelay_guest::FleetEvent,
            ) -> Result<(), $crate::jobrelay_guest::HandlerError> {
                NOTIFIER.get()?.handle_fleet(&event)
            }
        }

        $crate::jobrelay_guest::export_plugin!(Plugin);
    };
}
