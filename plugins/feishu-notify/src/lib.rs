//! `feishu-notify`: posts a card to a Feishu (Lark) custom bot when a job changes phase (or,
//! with a digest window, one card listing a window's jobs), and a cluster card for each fleet
//! event its manifest asks for (a cluster offline or back online, a fleet rule firing or
//! resolved).
//!
//! Meant for `delivery: transitions`. Everything around the card — config, routes, once per
//! transition, posting, what the status line means — is the notifier core's
//! (`jobrelay-notify`); this plugin adds Feishu's card (`card`, fitted to Feishu's 20 KB), its
//! signature (`sign`: an HMAC keyed by the timestamp and secret, in the body) and its answer
//! codes (`answer`).

mod answer;
mod card;
#[cfg(test)]
mod markup_tests;
mod sign;

use jobrelay_notify::answer::Outcome;
use jobrelay_notify::config::{Keys, Settings, Target};
use jobrelay_notify::{Outgoing, Provider, Subject};

use crate::card::Signature;

/// Feishu custom bots.
pub struct Feishu;

impl Provider for Feishu {
    const SERVICE: &'static str = "Feishu";
    /// Feishu allows 5 a second and 100 a minute per bot.
    const THROTTLE_SECONDS: u32 = 2;
    const KEYS: Keys = Keys {
        signed: true,
        mentions: false,
        own: &[],
    };

    fn new(_settings: &Settings) -> Result<Feishu, String> {
        Ok(Feishu)
    }

    fn request(
        &self,
        subject: Subject<'_>,
        settings: &Settings,
        target: &Target,
        now_ms: i64,
    ) -> Result<Outgoing, String> {
        let signature = target.secret.as_deref().map(|secret| {
            let timestamp = now_ms.div_euclid(1000);
            Signature {
                timestamp,
                sign: sign::sign(timestamp, secret),
            }
        });
        Ok(Outgoing {
            url: target.webhook.url(),
            body: match subject {
                Subject::Job(job) => card::body(job, settings, signature.as_ref())?,
                Subject::Digest(message) => card::digest_body(message, signature.as_ref())?,
                Subject::Fleet(event) => card::fleet_body(event, settings, signature.as_ref())?,
            },
        })
    }

    fn classify(&self, status: u16, body: &[u8]) -> Outcome {
        answer::classify(status, body)
    }
}

jobrelay_notify::export_notifier!(Feishu);
