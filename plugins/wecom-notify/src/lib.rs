//! `wecom-notify`: posts a message to a WeCom (企业微信) group robot when a job changes phase.
//!
//! Meant for `delivery: transitions`. The notifier core (`jobrelay-notify`) does config,
//! routes, once per transition, posting and the status line; this plugin adds WeCom's message
//! and answer codes. Two layouts (`msgtype`): `markdown` (the default; colours by phase,
//! mentions written `<@userid>` in the text, at most 4,096 bytes) and `text` (plain, at most
//! 2,048 bytes, mentions in `mentioned_list` / `mentioned_mobile_list`, the only way WeCom
//! mentions everyone or a mobile number). WeCom robots are not signed: the webhook's `key` is
//! the credential. `45009` (over 20 messages a minute) is throttling and retried; any other
//! non-zero code gives up. A fleet event (a cluster offline or back online, a rule firing or
//! resolved) is the same message with its own title and facts, coloured by its state.

use serde_json::json;

use jobrelay_notify::answer::{ErrCode, Outcome};
use jobrelay_notify::config::{Keys, Settings, Target};
use jobrelay_notify::markup::{wecom_markdown, wecom_text};
use jobrelay_notify::message::{Message, fit};
use jobrelay_notify::{Outgoing, Provider, Subject};

/// WeCom's limit on a markdown message's content.
const MAX_MARKDOWN_BYTES: usize = 4096;
/// WeCom's limit on a text message's content.
const MAX_TEXT_BYTES: usize = 2048;
/// "api freq out of limit".
const CODE_THROTTLED: i64 = 45_009;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MsgType {
    Markdown,
    Text,
}

pub struct WeCom {
    msgtype: MsgType,
}

impl Provider for WeCom {
    const SERVICE: &'static str = "WeCom";
    /// WeCom allows 20 a minute per robot.
    const THROTTLE_SECONDS: u32 = 10;
    const KEYS: Keys = Keys {
        signed: false,
        mentions: true,
        own: &["msgtype"],
    };

    fn new(settings: &Settings) -> Result<WeCom, String> {
        let msgtype = settings.own_choice(
            "msgtype",
            &[("markdown", MsgType::Markdown), ("text", MsgType::Text)],
        )?;
        let mentions = &settings.mentions;
        if msgtype == MsgType::Markdown && (mentions.everyone() || !mentions.mobiles.is_empty()) {
            return Err(
                "config `mention: all` and `mention_mobiles` need `msgtype: text` (WeCom \
                 markdown mentions only by user id)"
                    .to_string(),
            );
        }
        Ok(WeCom { msgtype })
    }

    fn request(
        &self,
        subject: Subject<'_>,
        settings: &Settings,
        target: &Target,
        _now_ms: i64,
    ) -> Result<Outgoing, String> {
        let message = subject.message(settings);
        let body = match self.msgtype {
            MsgType::Markdown => {
                let content = fit(&message, MAX_MARKDOWN_BYTES, |m| {
                    markdown(m, settings).into_bytes()
                })?;
                json!({
                    "msgtype": "markdown",
                    "markdown": { "content": String::from_utf8_lossy(&content) },
                })
            }
            MsgType::Text => {
                let content = fit(&message, MAX_TEXT_BYTES, |m| text(m).into_bytes())?;
                let mut text = json!({ "content": String::from_utf8_lossy(&content) });
                if message.mention {
                    let mentions = &settings.mentions;
                    let users: Vec<&str> = mentions
                        .users
                        .iter()
                        .map(|u| if u == "all" { "@all" } else { u.as_str() })
                        .collect();
                    text["mentioned_list"] = json!(users);
                    text["mentioned_mobile_list"] = json!(mentions.mobiles);
                }
                json!({ "msgtype": "text", "text": text })
            }
        };
        Ok(Outgoing {
            url: target.webhook.url(),
            body: body.to_string().into_bytes(),
        })
    }

    fn classify(&self, status: u16, body: &[u8]) -> Outcome {
        ErrCode::classify(status, body, Self::SERVICE, &[CODE_THROTTLED], hint)
    }
}

/// WeCom's markdown font colour for a phase or a fleet event's state: `warning` (orange) for
/// trouble (a failed or restarting job, a cluster offline, a rule firing), `info` (green) for
/// success or trouble's end (a succeeded job, a cluster back online, a rule resolved),
/// `comment` (grey) for the rest.
fn colour(phase: &str) -> &'static str {
    match phase {
        "failed" | "restarting" | "offline" | "firing" => "warning",
        "succeeded" | "online" | "resolved" => "info",
        _ => "comment",
    }
}

fn markdown(message: &Message, settings: &Settings) -> String {
    let mut content = format!(
        "**{}**\n<font color=\"{}\">{}</font>\n",
        wecom_markdown(&message.title),
        colour(message.phase),
        message.phase
    );
    for (label, value) in &message.facts {
        content.push_str(&format!("> {label}: {}\n", wecom_markdown(value)));
    }
    for (label, value) in free_text(message) {
        content.push_str(&format!("\n**{label}**: {}\n", wecom_markdown(value)));
    }
    if !message.links.is_empty() {
        let shown: Vec<String> = message
            .links
            .iter()
            .map(|(label, url)| format!("[{label}]({url})"))
            .collect();
        content.push_str(&format!("\n{}\n", shown.join("  ")));
    }
    if message.mention {
        let named: Vec<String> = settings
            .mentions
            .users
            .iter()
            .map(|u| format!("<@{u}>"))
            .collect();
        content.push_str(&format!("\n{}", named.join(" ")));
    }
    content
}

/// The message as plain text. Nothing in it formats, but WeCom still reads `<@userid>` in a
/// text's content as a mention and links addresses, so job text goes through [`wecom_text`].
fn text(message: &Message) -> String {
    let mut content = format!("{}\n", wecom_text(&message.title));
    for (label, value) in &message.facts {
        content.push_str(&format!("{label}: {}\n", wecom_text(value)));
    }
    for (label, value) in free_text(message) {
        content.push_str(&format!("{label}: {}\n", wecom_text(value)));
    }
    for (label, url) in &message.links {
        content.push_str(&format!("{label}: {url}\n"));
    }
    content
}

fn free_text(message: &Message) -> impl Iterator<Item = (&'static str, &String)> {
    [
        ("Reason", &message.reason),
        ("Message", &message.detail),
        ("Labels", &message.labels),
    ]
    .into_iter()
    .filter_map(|(label, value)| value.as_ref().map(|v| (label, v)))
}

/// What to check for each permanent refusal.
fn hint(code: i64) -> &'static str {
    match code {
        93_000 => ": is the webhook's key right?",
        40_058 | 44_004 => ": the message was empty or too long",
        _ => "",
    }
}

jobrelay_notify::export_notifier!(WeCom);

#[cfg(test)]
mod markup_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use jobrelay_notify::job::{JobEvent, Phase, sample};
    use jobrelay_notify::testing;
    use serde_json::Value;

    const HOOK: &str = "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=693a91f6-7xxx";

    fn send(pairs: &[(&str, &str)], job: &JobEvent) -> Result<Value, String> {
        testing::body::<WeCom>(HOOK, pairs, job)
    }

    #[test]
    fn markdown_with_colour_and_user_mentions() {
        let body = send(&[("mention", "zhangsan")], &sample()).expect("valid");
        assert_eq!(body["msgtype"], "markdown");
        let content = body["markdown"]["content"].as_str().expect("content");
        assert!(
            content.contains("<font color=\"warning\">failed</font>"),
            "{content}"
        );
        assert!(content.contains("ml/llama-finetune"), "{content}");
        assert!(content.ends_with("<@zhangsan>"), "{content}");
        let mut done = sample();
        done.phase = Phase::Succeeded;
        let body = send(&[("mention", "zhangsan")], &done).expect("valid");
        let content = body["markdown"]["content"].as_str().expect("content");
        assert!(!content.contains("<@"), "no mention on success: {content}");
    }

    #[test]
    fn text_mentions_everyone_and_mobiles() {
        let body = send(
            &[
                ("msgtype", "text"),
                ("mention", "zhangsan,all"),
                ("mention_mobiles", "13800001111"),
            ],
            &sample(),
        )
        .expect("valid");
        assert_eq!(body["msgtype"], "text");
        assert_eq!(body["text"]["mentioned_list"], json!(["zhangsan", "@all"]));
        assert_eq!(
            body["text"]["mentioned_mobile_list"],
            json!(["13800001111"])
        );
        let error = send(&[("mention", "all")], &sample()).expect_err("markdown cannot");
        assert!(error.contains("msgtype: text"), "{error}");
        let error = send(&[("msgtype", "news")], &sample()).expect_err("unknown");
        assert!(error.contains("`news`"), "{error}");
    }

    #[test]
    fn limits_and_markup() {
        let mut job = sample();
        job.message = Some(format!("<@all> {}", "é".repeat(5000)));
        let body = send(&[], &job).expect("valid");
        let content = body["markdown"]["content"].as_str().expect("content");
        assert!(content.len() <= MAX_MARKDOWN_BYTES, "{}", content.len());
        assert!(!content.contains("<@all>"));
        let body = send(&[("msgtype", "text")], &job).expect("valid");
        let content = body["text"]["content"].as_str().expect("content");
        assert!(content.len() <= MAX_TEXT_BYTES, "{}", content.len());
    }

    #[test]
    fn fleet_events_are_coloured_by_their_state() {
        let notifier = testing::notifier::<WeCom>(HOOK, &[]).expect("valid");
        let (url, body) =
            testing::fleet_request(&notifier, &jobrelay_notify::fleet::sample_firing(), 0)
                .expect("a request");
        assert_eq!(url, HOOK);
        let content = body["markdown"]["content"].as_str().expect("content");
        assert!(
            content.starts_with(
                "**Rule failure-ratio is firing on east**\n<font color=\"warning\">firing</font>"
            ),
            "{content}"
        );
        assert!(content.contains("> Threshold: 0.15"), "{content}");
        let mut online = jobrelay_notify::fleet::sample_offline();
        online.kind = jobrelay_notify::fleet::FleetEventKind::ClusterOnline;
        let (_, body) = testing::fleet_request(&notifier, &online, 0).expect("a request");
        let content = body["markdown"]["content"].as_str().expect("content");
        assert!(
            content.contains("<font color=\"info\">online</font>"),
            "{content}"
        );
    }

    #[test]
    fn answers() {
        let provider = WeCom {
            msgtype: MsgType::Markdown,
        };
        let classify = |body: &str| provider.classify(200, body.as_bytes());
        assert_eq!(
            classify(r#"{"errcode":0,"errmsg":"ok"}"#),
            Outcome::Delivered
        );
        assert!(matches!(
            classify(r#"{"errcode":45009,"errmsg":"api freq out of limit"}"#),
            Outcome::Throttled(_)
        ));
        assert!(matches!(
            classify(r#"{"errcode":93000,"errmsg":"invalid webhook url"}"#),
            Outcome::GiveUp(m) if m.contains("key")
        ));
    }
}
