//! `dingtalk-notify`: posts a message to a DingTalk custom robot when a job changes phase.
//!
//! Meant for `delivery: transitions`. The notifier core (`jobrelay-notify`) does config,
//! routes, once per transition, posting and the status line; this plugin adds DingTalk's
//! message (`markdown`, or an `actionCard` whose buttons are the configured links), mentions
//! (`at.atUserIds` / `at.atMobiles`, named in the text as DingTalk wants), the robot's
//! signature (in the URL: `timestamp` in milliseconds and `sign`, the Base64 of an HMAC-SHA256
//! keyed by the secret over `timestamp + "\n" + secret`) and its answer codes: `130101` (more
//! than 20 messages a minute) is throttling and retried, everything else non-zero gives up. A
//! fleet event (a cluster offline or back online, a rule firing or resolved) goes as markdown
//! whatever the `style`: it has no links to make buttons of.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

use jobrelay_notify::answer::{ErrCode, Outcome};
use jobrelay_notify::config::{Keys, Settings, Target};
use jobrelay_notify::markup::dingtalk_markdown;
use jobrelay_notify::message::{Message, fit};
use jobrelay_notify::{Outgoing, Provider, Subject};

/// DingTalk's body limit.
const MAX_BODY_BYTES: usize = 20_000;
/// "Sending too fast": over 20 messages a minute for one robot.
const CODE_THROTTLED: i64 = 130_101;

/// How a message is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Style {
    Markdown,
    /// An action card: the links become buttons. DingTalk cards cannot mention anyone.
    ActionCard,
}

pub struct DingTalk {
    style: Style,
}

impl Provider for DingTalk {
    const SERVICE: &'static str = "DingTalk";
    /// DingTalk allows 20 a minute per robot.
    const THROTTLE_SECONDS: u32 = 10;
    const KEYS: Keys = Keys {
        signed: true,
        mentions: true,
        own: &["style"],
    };

    fn new(settings: &Settings) -> Result<DingTalk, String> {
        let style = settings.own_choice(
            "style",
            &[
                ("markdown", Style::Markdown),
                ("action_card", Style::ActionCard),
            ],
        )?;
        if style == Style::ActionCard {
            if settings.links.is_empty() {
                return Err(
                    "config `style: action_card` needs at least one `link.<label>` for its buttons"
                        .to_string(),
                );
            }
            if !settings.mentions.users.is_empty() || !settings.mentions.mobiles.is_empty() {
                return Err(
                    "config `mention`: DingTalk action cards cannot mention anyone; use \
                     `style: markdown`"
                        .to_string(),
                );
            }
        }
        Ok(DingTalk { style })
    }

    fn request(
        &self,
        subject: Subject<'_>,
        settings: &Settings,
        target: &Target,
        now_ms: i64,
    ) -> Result<Outgoing, String> {
        let message = subject.message(settings);
        let body = fit(&message, MAX_BODY_BYTES, |m| {
            self.body(m, settings).to_string().into_bytes()
        })?;
        let mut url = target.webhook.url();
        if let Some(secret) = &target.secret {
            let separator = if url.contains('?') { '&' } else { '?' };
            url.push_str(&format!(
                "{separator}timestamp={now_ms}&sign={}",
                url_encode(&sign(now_ms, secret))
            ));
        }
        Ok(Outgoing { url, body })
    }

    fn classify(&self, status: u16, body: &[u8]) -> Outcome {
        ErrCode::classify(status, body, Self::SERVICE, &[CODE_THROTTLED], hint)
    }
}

impl DingTalk {
    fn body(&self, message: &Message, settings: &Settings) -> Value {
        let title = dingtalk_markdown(&message.title);
        // A message without links (a fleet event's) has no buttons for an action card.
        let style = if message.links.is_empty() {
            Style::Markdown
        } else {
            self.style
        };
        match style {
            Style::Markdown => {
                let mut text = markdown(message, true);
                let mut at = json!({});
                if message.mention {
                    let mentions = &settings.mentions;
                    let users: Vec<&String> =
                        mentions.users.iter().filter(|u| *u != "all").collect();
                    // DingTalk highlights only the people the text names.
                    let named: Vec<String> = users
                        .iter()
                        .map(|u| format!("@{u}"))
                        .chain(mentions.mobiles.iter().map(|m| format!("@{m}")))
                        .collect();
                    if !named.is_empty() {
                        text.push_str(&format!("\n\n{}", named.join(" ")));
                    }
                    at = json!({
                        "atUserIds": users,
                        "atMobiles": mentions.mobiles,
                        "isAtAll": mentions.everyone(),
                    });
                }
                json!({
                    "msgtype": "markdown",
                    "markdown": { "title": title, "text": text },
                    "at": at,
                })
            }
            Style::ActionCard => json!({
                "msgtype": "actionCard",
                "actionCard": {
                    "title": title,
                    "text": markdown(message, false),
                    "btnOrientation": if message.links.len() > 2 { "0" } else { "1" },
                    "btns": message.links.iter().map(|(label, url)| {
                        json!({ "title": label, "actionURL": url })
                    }).collect::<Vec<_>>(),
                },
            }),
        }
    }
}

/// The message as DingTalk markdown; the links inline when they are not buttons.
fn markdown(message: &Message, links: bool) -> String {
    let mut text = format!("#### {}\n\n", dingtalk_markdown(&message.title));
    for (label, value) in &message.facts {
        text.push_str(&format!("- **{label}**: {}\n", dingtalk_markdown(value)));
    }
    for (label, value) in [
        ("Reason", &message.reason),
        ("Message", &message.detail),
        ("Labels", &message.labels),
    ] {
        if let Some(value) = value {
            text.push_str(&format!("\n**{label}**: {}\n", dingtalk_markdown(value)));
        }
    }
    if links && !message.links.is_empty() {
        let shown: Vec<String> = message
            .links
            .iter()
            .map(|(label, url)| format!("[{label}]({url})"))
            .collect();
        text.push_str(&format!("\n{}\n", shown.join(" · ")));
    }
    text
}

/// The robot's `sign`: Base64 of HMAC-SHA256 keyed by `secret` over `"{timestamp_ms}\n{secret}"`.
fn sign(timestamp_ms: i64, secret: &str) -> String {
    // HMAC accepts keys of any length, so construction cannot fail; an empty signature (which
    // DingTalk refuses with a clear code) beats a panic if it ever did.
    match Hmac::<Sha256>::new_from_slice(secret.as_bytes()) {
        Ok(mut mac) => {
            mac.update(format!("{timestamp_ms}\n{secret}").as_bytes());
            BASE64.encode(mac.finalize().into_bytes())
        }
        Err(_) => String::new(),
    }
}

/// Percent-encodes what Base64 can contain besides letters and digits.
fn url_encode(text: &str) -> String {
    text.replace('+', "%2B")
        .replace('/', "%2F")
        .replace('=', "%3D")
}

/// What to check for each permanent refusal.
fn hint(code: i64) -> &'static str {
    match code {
        310_000 => {
            ": check `secret` against the robot's signature setting and the host clock, the \
             robot's keywords (put one in `title`) and its IP allowlist"
        }
        300_001 => ": is the webhook's access_token right?",
        460_101 => ": the message is too long",
        _ => "",
    }
}

jobrelay_notify::export_notifier!(DingTalk);

#[cfg(test)]
mod markup_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use jobrelay_notify::job::{JobEvent, sample};
    use jobrelay_notify::{Notifier, testing};

    const HOOK: &str = "https://oapi.dingtalk.com/robot/send?access_token=0123456789abcdef";

    fn notifier(pairs: &[(&str, &str)]) -> Result<Notifier<DingTalk>, String> {
        testing::notifier::<DingTalk>(HOOK, pairs)
    }

    fn send(pairs: &[(&str, &str)], job: &JobEvent) -> (String, Value) {
        let notifier = notifier(pairs).expect("valid");
        testing::request(&notifier, job, 1_700_000_000_123).expect("a request")
    }

    #[test]
    fn signature_matches_an_independent_computation() {
        // Python: base64.b64encode(hmac.new(b"SEC-demo", b"1700000000123\nSEC-demo",
        // hashlib.sha256).digest())
        assert_eq!(
            sign(1_700_000_000_123, "SEC-demo"),
            "C+d5G5KbDTggPdDtwboiX1dUJrsWXrYexxo9DultauY="
        );
        assert_eq!(url_encode("a+b/c="), "a%2Bb%2Fc%3D");
    }

    #[test]
    fn signed_url_and_markdown_with_mentions() {
        let (url, body) = send(
            &[
                ("secret", "SEC-demo"),
                ("mention", "manager01,all"),
                ("mention_mobiles", "13800000000"),
            ],
            &sample(),
        );
        assert!(
            url.starts_with(&format!("{HOOK}&timestamp=1700000000123&sign=")),
            "{url}"
        );
        assert!(url.ends_with(&url_encode(&sign(1_700_000_000_123, "SEC-demo"))));
        assert_eq!(body["msgtype"], "markdown");
        let text = body["markdown"]["text"].as_str().expect("text");
        assert!(text.contains("ml/llama-finetune"), "{text}");
        assert!(text.contains("BackoffLimitExceeded"), "{text}");
        assert!(text.contains("@manager01 @13800000000"), "{text}");
        assert_eq!(body["at"]["atUserIds"], json!(["manager01"]));
        assert_eq!(body["at"]["atMobiles"], json!(["13800000000"]));
        assert_eq!(body["at"]["isAtAll"], json!(true));
    }

    #[test]
    fn no_mention_outside_the_mention_phases_and_unsigned_without_secret() {
        let mut job = sample();
        job.phase = jobrelay_notify::job::Phase::Succeeded;
        let (url, body) = send(&[("mention", "manager01")], &job);
        assert_eq!(url, HOOK);
        assert_eq!(body["at"], json!({}));
        assert!(
            !body["markdown"]["text"]
                .as_str()
                .unwrap_or("")
                .contains('@')
        );
    }

    #[test]
    fn action_cards_carry_the_links_as_buttons() {
        let (_, body) = send(
            &[
                ("style", "action_card"),
                ("link.Logs", "https://logs.example/?job={name}"),
            ],
            &sample(),
        );
        assert_eq!(body["msgtype"], "actionCard");
        assert_eq!(
            body["actionCard"]["btns"],
            json!([{"title": "Logs", "actionURL": "https://logs.example/?job=llama-finetune"}])
        );
        assert!(notifier(&[("style", "action_card")]).is_err());
        let error = notifier(&[
            ("style", "action_card"),
            ("link.Logs", "https://l.example/"),
            ("mention", "x"),
        ])
        .err()
        .expect("refused");
        assert!(error.contains("`mention`"), "{error}");
        let error = notifier(&[("style", "card")]).err().expect("refused");
        assert!(
            error.contains("`style`") && error.contains("`card`"),
            "{error}"
        );
    }

    #[test]
    fn cluster_text_cannot_mention_and_long_text_fits() {
        let mut job = sample();
        job.message = Some(format!("@all <font>{}", "x".repeat(40_000)));
        let (_, body) = send(&[], &job);
        let text = body["markdown"]["text"].as_str().expect("text");
        assert!(
            !text.contains("@all") && !text.contains("<font>"),
            "markup neutralised"
        );
        assert!(body.to_string().len() <= MAX_BODY_BYTES);
        assert!(text.contains("…(truncated)"));
    }

    #[test]
    fn fleet_events_go_as_signed_markdown_even_with_action_cards() {
        let notifier = notifier(&[
            ("style", "action_card"),
            ("link.Logs", "https://logs.example/?job={name}"),
            ("secret", "SEC-demo"),
        ])
        .expect("valid");
        let (url, body) = testing::fleet_request(
            &notifier,
            &jobrelay_notify::fleet::sample_offline(),
            1_700_000_000_123,
        )
        .expect("a request");
        assert!(
            url.starts_with(&format!("{HOOK}&timestamp=1700000000123&sign=")),
            "{url}"
        );
        assert_eq!(body["msgtype"], "markdown");
        assert_eq!(body["markdown"]["title"], "Cluster east is offline");
        let text = body["markdown"]["text"].as_str().expect("text");
        assert!(text.contains("**Since**: 2026-11-28T10:00:00Z"), "{text}");
        assert!(text.contains("connection refused"), "{text}");
    }

    #[test]
    fn answers() {
        let provider = DingTalk {
            style: Style::Markdown,
        };
        let classify = |body: &str| provider.classify(200, body.as_bytes());
        assert_eq!(
            classify(r#"{"errcode":0,"errmsg":"ok"}"#),
            Outcome::Delivered
        );
        assert!(matches!(
            classify(r#"{"errcode":130101,"errmsg":"send too fast"}"#),
            Outcome::Throttled(_)
        ));
        let Outcome::GiveUp(message) = classify(r#"{"errcode":310000,"errmsg":"sign not match"}"#)
        else {
            panic!("a bad signature gives up");
        };
        assert!(message.contains("secret"), "{message}");
    }
}
