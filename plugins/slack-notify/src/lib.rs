//! `slack-notify`: posts a Block Kit message to a Slack incoming webhook when a job changes
//! phase.
//!
//! Meant for `delivery: transitions`. The notifier core (`jobrelay-notify`) does config,
//! routes, once per transition, posting and the status line; this plugin adds the blocks (a
//! header, the facts as fields, the free text, the labels as context, the links as buttons, and
//! the mentions: user ids as `<@U…>`, `all` as `<!channel>`) with a plain `text` fallback for
//! notifications, within Slack's block limits. Slack answers with plain text: `ok` with 200;
//! 429 (throttled: about one message a second per webhook) and 5xx are retried, anything else
//! (`invalid_blocks`, `no_service`, `channel_is_archived`, …) gives up naming it. Incoming
//! webhooks are not signed: the URL is the credential. A fleet event (a cluster offline or back
//! online, a rule firing or resolved) is the same blocks with its own title and facts.

use serde_json::{Value, json};

use jobrelay_notify::answer::{Outcome, by_status};
use jobrelay_notify::config::{Keys, Settings, Target};
use jobrelay_notify::markup::{slack_mrkdwn, slack_plain_text};
use jobrelay_notify::message::{Message, fit};
use jobrelay_notify::{Outgoing, Provider, Subject};

/// A header block's text limit, in characters.
const MAX_HEADER_CHARS: usize = 150;
/// A section's text limit, in characters (bytes are counted, which is stricter).
const MAX_SECTION_BYTES: usize = 3000;
/// A field's text limit, in characters.
const MAX_FIELD_CHARS: usize = 2000;
/// Fields per section and buttons per actions block.
const MAX_FIELDS: usize = 10;
const MAX_BUTTONS: usize = 25;
/// A button label's limit, in characters.
const MAX_BUTTON_CHARS: usize = 75;

pub struct Slack;

impl Provider for Slack {
    const SERVICE: &'static str = "Slack";
    /// Slack allows about one a second per webhook and says how long in `Retry-After`.
    const THROTTLE_SECONDS: u32 = 1;
    const KEYS: Keys = Keys {
        signed: false,
        mentions: true,
        own: &[],
    };

    fn new(settings: &Settings) -> Result<Slack, String> {
        if !settings.mentions.mobiles.is_empty() {
            return Err(
                "config `mention_mobiles`: Slack mentions by user id (`mention: U012AB3CD`)"
                    .to_string(),
            );
        }
        Ok(Slack)
    }

    fn request(
        &self,
        subject: Subject<'_>,
        settings: &Settings,
        target: &Target,
        _now_ms: i64,
    ) -> Result<Outgoing, String> {
        let message = subject.message(settings);
        // The free text is the one section that can be long; fit it, then lay out the rest.
        let detail = fit(&message, MAX_SECTION_BYTES, |m| details(m).into_bytes())?;
        let detail = String::from_utf8_lossy(&detail).into_owned();
        Ok(Outgoing {
            url: target.webhook.url(),
            body: blocks(&message, &detail, settings).to_string().into_bytes(),
        })
    }

    fn classify(&self, status: u16, body: &[u8]) -> Outcome {
        let said: String = String::from_utf8_lossy(body).chars().take(200).collect();
        let detail = if said.trim().is_empty() {
            String::new()
        } else {
            format!(": {}", said.trim())
        };
        if let Some(outcome) = by_status(status, &detail) {
            return outcome;
        }
        Outcome::Delivered
    }
}

/// The reason, message and labels as one mrkdwn text.
fn details(message: &Message) -> String {
    [
        ("Reason", &message.reason),
        ("Message", &message.detail),
        ("Labels", &message.labels),
    ]
    .into_iter()
    .filter_map(|(label, value)| {
        value
            .as_ref()
            .map(|v| format!("*{label}*: {}", slack_mrkdwn(v)))
    })
    .collect::<Vec<_>>()
    .join("\n")
}

/// `text` cut to `max` characters with a mark. Never inside one of the neutraliser's entities
/// (`&amp;`, `&lt;`, `&gt;`): half of one would show as a stray `&`.
fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut kept: String = text.chars().take(max - 1).collect();
    if let Some(at) = kept.rfind('&').filter(|&at| !kept[at..].contains(';')) {
        kept.truncate(at);
    }
    kept.push('…');
    kept
}

/// A `mrkdwn` text object of job text. `verbatim` turns off Slack's own parsing of the text
/// (URLs, channel names and bare mentions made into links), which the neutraliser already keeps
/// from mattering: it is the service's switch for exactly this.
fn mrkdwn(text: String) -> Value {
    json!({ "type": "mrkdwn", "text": text, "verbatim": true })
}

fn blocks(message: &Message, detail: &str, settings: &Settings) -> Value {
    let mut blocks = vec![json!({
        "type": "header",
        "text": {
            "type": "plain_text",
            "text": cut(&slack_plain_text(&message.title), MAX_HEADER_CHARS),
        },
    })];
    let fields: Vec<Value> = message
        .facts
        .iter()
        .take(MAX_FIELDS)
        .map(|(label, value)| {
            mrkdwn(cut(
                &format!("*{label}*\n{}", slack_mrkdwn(value)),
                MAX_FIELD_CHARS,
            ))
        })
        .collect();
    blocks.push(json!({ "type": "section", "fields": fields }));
    if !detail.is_empty() {
        blocks.push(json!({ "type": "section", "text": mrkdwn(detail.to_string()) }));
    }
    if message.mention {
        let named: Vec<String> = settings
            .mentions
            .users
            .iter()
            .map(|u| {
                if u == "all" {
                    "<!channel>".to_string()
                } else {
                    format!("<@{u}>")
                }
            })
            .collect();
        blocks.push(
            json!({ "type": "section", "text": { "type": "mrkdwn", "text": named.join(" ") } }),
        );
    }
    if !message.links.is_empty() {
        let buttons: Vec<Value> = message
            .links
            .iter()
            .take(MAX_BUTTONS)
            .map(|(label, url)| {
                json!({
                    "type": "button",
                    "text": { "type": "plain_text", "text": cut(label, MAX_BUTTON_CHARS) },
                    "url": url,
                })
            })
            .collect();
        blocks.push(json!({ "type": "actions", "elements": buttons }));
    }
    // What notifications show: mrkdwn, where a mention in it would notify.
    json!({ "text": slack_mrkdwn(&message.title), "blocks": blocks })
}

jobrelay_notify::export_notifier!(Slack);

#[cfg(test)]
mod markup_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use jobrelay_notify::job::{JobEvent, Phase, sample};
    use jobrelay_notify::testing;

    const HOOK: &str = "https://hooks.slack.com/services/T000/B000/XXXXXXXXXXXXXXXXXXXXXXXX";

    fn send(pairs: &[(&str, &str)], job: &JobEvent) -> Result<Value, String> {
        testing::body::<Slack>(HOOK, pairs, job)
    }

    #[test]
    fn blocks_with_fields_buttons_and_mentions() {
        let body = send(
            &[
                ("mention", "U012AB3CD,all"),
                ("link.Logs", "https://logs.example/?job={name}"),
            ],
            &sample(),
        )
        .expect("valid");
        assert_eq!(body["text"], "PyTorchJob ml/llama-finetune: failed");
        let blocks = body["blocks"].as_array().expect("blocks");
        assert_eq!(blocks[0]["type"], "header");
        assert_eq!(blocks[1]["fields"][0]["text"], "*Job*\nml/llama-finetune");
        assert!(
            blocks[2]["text"]["text"]
                .as_str()
                .unwrap_or("")
                .contains("BackoffLimitExceeded")
        );
        assert_eq!(blocks[3]["text"]["text"], "<@U012AB3CD> <!channel>");
        assert_eq!(
            blocks[4]["elements"][0]["url"],
            "https://logs.example/?job=llama-finetune"
        );

        let mut done = sample();
        done.phase = Phase::Succeeded;
        let body = send(&[("mention", "U012AB3CD")], &done).expect("valid");
        assert!(!body.to_string().contains("<@U012AB3CD>"));
        let error = send(&[("mention_mobiles", "1")], &sample()).expect_err("refused");
        assert!(error.contains("`mention_mobiles`"), "{error}");
    }

    #[test]
    fn limits_and_markup() {
        let mut job = sample();
        job.name = "n".repeat(300);
        job.message = Some(format!("<!channel> {}", "x".repeat(10_000)));
        let body = send(&[], &job).expect("valid");
        let blocks = body["blocks"].as_array().expect("blocks");
        let header = blocks[0]["text"]["text"].as_str().expect("header");
        assert_eq!(header.chars().count(), MAX_HEADER_CHARS);
        let detail = blocks[2]["text"]["text"].as_str().expect("detail");
        assert!(detail.len() <= MAX_SECTION_BYTES && detail.contains("…(truncated)"));
        assert!(!detail.contains("<!channel>"));
    }

    #[test]
    fn fleet_events_are_blocks_of_their_own() {
        let notifier =
            testing::notifier::<Slack>(HOOK, &[("mention", "U012AB3CD")]).expect("valid");
        let (url, body) =
            testing::fleet_request(&notifier, &jobrelay_notify::fleet::sample_firing(), 0)
                .expect("a request");
        assert_eq!(url, HOOK);
        assert_eq!(body["text"], "Rule failure-ratio is firing on east");
        let blocks = body["blocks"].as_array().expect("blocks");
        assert_eq!(blocks[1]["fields"][1]["text"], "*Rule*\nfailure-ratio");
        assert!(
            blocks[2]["text"]["text"]
                .as_str()
                .unwrap_or("")
                .contains("failure ratio 0.31 &gt; 0.15"),
            "{body}"
        );
        assert_eq!(blocks[3]["text"]["text"], "<@U012AB3CD>");
    }

    #[test]
    fn answers() {
        assert_eq!(Slack.classify(200, b"ok"), Outcome::Delivered);
        assert!(matches!(
            Slack.classify(429, b"rate_limited"),
            Outcome::Throttled(_)
        ));
        assert!(matches!(Slack.classify(503, b""), Outcome::Retry(_)));
        assert!(matches!(
            Slack.classify(400, b"invalid_blocks"),
            Outcome::GiveUp(m) if m.contains("invalid_blocks")
        ));
        assert!(matches!(
            Slack.classify(404, b"no_service"),
            Outcome::GiveUp(m) if m.contains("no_service")
        ));
    }
}
