//! What the providers' own tests share: a notifier from a config, and the request it makes.
//! Not behind `cfg(test)`: a dependency's test-only items are out of its dependents' reach
//! (and the linker drops it from the components).

use serde_json::Value;

use crate::config::Settings;
use crate::fleet::FleetEvent;
use crate::job::JobEvent;
use crate::{Notifier, Outgoing, Provider, Subject};

/// The notifier `pairs` configure, with `webhook` as its bot.
pub fn notifier<P: Provider>(webhook: &str, pairs: &[(&str, &str)]) -> Result<Notifier<P>, String> {
    let mut config: Vec<(String, String)> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    config.push(("webhook".into(), webhook.into()));
    // The host hands the map sorted by key.
    config.sort();
    Notifier::from_config(&config)
}

/// The request announcing `job` at `now_ms`, its body parsed.
pub fn request<P: Provider>(
    notifier: &Notifier<P>,
    job: &JobEvent,
    now_ms: i64,
) -> Result<(String, Value), String> {
    let settings: &Settings = &notifier.settings;
    let target = settings
        .target_for(job)
        .ok_or("no bot for the job")?
        .clone();
    let Outgoing { url, body } =
        notifier
            .provider
            .request(Subject::Job(job), settings, &target, now_ms)?;
    let body = serde_json::from_slice(&body).map_err(|e| format!("the body is not JSON: {e}"))?;
    Ok((url, body))
}

/// The body announcing `job` for a bot at `webhook` configured by `pairs`, for a service whose
/// URL is the webhook as written (not signed in the URL).
pub fn body<P: Provider>(
    webhook: &str,
    pairs: &[(&str, &str)],
    job: &JobEvent,
) -> Result<Value, String> {
    let (url, body) = request(&notifier::<P>(webhook, pairs)?, job, 0)?;
    if url != webhook {
        return Err(format!("posted to {url}, not to the webhook"));
    }
    Ok(body)
}

/// The request announcing the fleet event `event` at `now_ms`, its body parsed.
pub fn fleet_request<P: Provider>(
    notifier: &Notifier<P>,
    event: &FleetEvent,
    now_ms: i64,
) -> Result<(String, Value), String> {
    let settings: &Settings = &notifier.settings;
    let target = settings
        .fleet_target()
        .ok_or("no bot for fleet events")?
        .clone();
    let Outgoing { url, body } =
        notifier
            .provider
            .request(Subject::Fleet(event), settings, &target, now_ms)?;
    let body = serde_json::from_slice(&body).map_err(|e| format!("the body is not JSON: {e}"))?;
    Ok((url, body))
}

/// The request announcing a digest of `lines` about `job`'s namespace and phase at `now_ms`,
/// its body parsed.
pub fn digest_request<P: Provider>(
    notifier: &Notifier<P>,
    job: &JobEvent,
    lines: &[String],
    now_ms: i64,
) -> Result<(String, Value), String> {
    let settings: &Settings = &notifier.settings;
    let target = settings
        .target_for(job)
        .ok_or("no bot for the job")?
        .clone();
    let digest = crate::message::Message::digest(job, lines, settings);
    let Outgoing { url, body } =
        notifier
            .provider
            .request(Subject::Digest(&digest), settings, &target, now_ms)?;
    let body = serde_json::from_slice(&body).map_err(|e| format!("the body is not JSON: {e}"))?;
    Ok((url, body))
}
