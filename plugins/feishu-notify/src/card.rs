//! The message body: an interactive card describing one job event, signed if the bot wants it,
//! and always small enough for Feishu. A digest and a fleet event get cards of their own
//! ([`digest_body`], [`fleet_body`]).
//!
//! Layout: the header carries the title and a colour for the phase; a first block of short
//! fields (cluster, namespace, job, kind, phase, duration) reads as a two-column grid; a second
//! block holds the long free text (reason, message, labels); a row of buttons holds the
//! configured links. Values from the cluster go into `lark_md` text through Feishu's neutraliser
//! ([`feishu_lark_md`]), and into the `plain_text` header through [`feishu_plain_text`], so a
//! job message cannot smuggle in an `<at id=all>` mention, a link, emphasis or code.
//!
//! Feishu refuses bodies over 20 KB, and a failing job's message (a stack trace, a log tail) can
//! be longer than that on its own. Rather than lose the notification, the free text is cut, at a
//! character boundary and with a visible mark: the message first, then the reason, then the
//! labels, until the body fits.

use std::borrow::Cow;

use serde_json::{Value, json};

use jobrelay_guest::{phase_from_name, phase_name};
use jobrelay_notify::config::Settings;
use jobrelay_notify::duration::run_time;
use jobrelay_notify::fleet::{FleetEvent, fleet_is_trouble};
use jobrelay_notify::job::{JobEvent, Phase};
use jobrelay_notify::markup::{feishu_lark_md, feishu_plain_text};
use jobrelay_notify::message::{Message, fit};

/// Feishu's body limit, signature fields included.
pub const MAX_BODY_BYTES: usize = 20 * 1024;
/// Appended where text was cut.
pub const TRUNCATED: &str = "…(truncated)";

/// The signature fields of a signed message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signature {
    /// Unix seconds, sent as a string.
    pub timestamp: i64,
    pub sign: String,
}

/// The serialized body for `job`, at most [`MAX_BODY_BYTES`] long. Fails only when even with
/// all free text cut the card is too large (an enormous configured title or link list).
pub fn body(
    job: &JobEvent,
    settings: &Settings,
    signature: Option<&Signature>,
) -> Result<Vec<u8>, String> {
    let mut card = Card::new(job, settings, signature);
    let mut bytes = card.to_bytes();
    for part in 0..Card::CUTTABLE {
        if bytes.len() <= MAX_BODY_BYTES {
            break;
        }
        let Some(len) = card.cuttable(part).map(|text| text.text.len()) else {
            continue;
        };
        // Not enough even with this part gone: leave it cut to the mark and go on to the next.
        bytes = card.bytes_with_cut(part, 0);
        if bytes.len() > MAX_BODY_BYTES {
            continue;
        }
        // Keep as much as fits. Escaping makes the body grow unevenly with the text (`<` costs
        // four bytes, `é` two), so the longest fitting cut is searched for, not computed.
        let (mut fits, mut too_long) = (0, len);
        while too_long - fits > 1 {
            let mid = fits + (too_long - fits) / 2;
            if card.bytes_with_cut(part, mid).len() <= MAX_BODY_BYTES {
                fits = mid;
            } else {
                too_long = mid;
            }
        }
        bytes = card.bytes_with_cut(part, fits);
    }
    if bytes.len() > MAX_BODY_BYTES {
        return Err(format!(
            "the card is {} bytes even with its free text cut, over Feishu's limit of {MAX_BODY_BYTES}; \
             shorten `title` or the `link.*` templates",
            bytes.len()
        ));
    }
    Ok(bytes)
}

/// Free text that may be cut to fit.
struct Cuttable {
    text: String,
    /// Bytes of `text` shown; always at a character boundary.
    keep: usize,
    cut: bool,
}

impl Cuttable {
    fn new(text: String) -> Cuttable {
        Cuttable {
            keep: text.len(),
            text,
            cut: false,
        }
    }

    fn shown(&self) -> Cow<'_, str> {
        if self.cut {
            Cow::Owned(format!("{}{TRUNCATED}", &self.text[..self.keep]))
        } else {
            Cow::Borrowed(&self.text)
        }
    }

    /// Shows the first `keep` bytes (rounded down to a character boundary) and the mark.
    fn cut_to(&mut self, keep: usize) {
        self.keep = self.text.floor_char_boundary(keep.min(self.text.len()));
        self.cut = true;
    }
}

/// Everything a card shows; only the cuttable parts change while fitting.
struct Card {
    header: Value,
    short_fields: Vec<Value>,
    links: Option<Value>,
    reason: Option<Cuttable>,
    message: Option<Cuttable>,
    labels: Option<Cuttable>,
    signature: Option<Signature>,
}

impl Card {
    /// How many parts may be cut, numbered in the order they are cut.
    const CUTTABLE: usize = 3;

    fn new(job: &JobEvent, settings: &Settings, signature: Option<&Signature>) -> Card {
        let header = json!({
            "title": {
                "tag": "plain_text",
                "content": feishu_plain_text(&settings.title.render(job)),
            },
            "template": colour(job.phase),
        });

        let mut short_fields = vec![
            field("Cluster", &job.cluster, true),
            field("Namespace", &job.namespace, true),
            field("Job", &job.name, true),
            field("Kind", &kind_text(job), true),
            field("Phase", &phase_text(job), true),
        ];
        if let Some(duration) = run_time(&job.object_json, &job.transition_time) {
            short_fields.push(field("Duration", &duration, true));
        }
        // The job's story, when its kind tells it: queue, queue state, preemptions, failure.
        if let Some(story) = jobrelay_notify::job::story() {
            for (label, value) in jobrelay_notify::message::story_facts(&story) {
                short_fields.push(field(label, &value, true));
            }
        }

        let links = (!settings.links.is_empty()).then(|| {
            let buttons: Vec<Value> = settings
                .links
                .iter()
                .map(|link| {
                    json!({
                        "tag": "button",
                        "text": { "tag": "plain_text", "content": link.label },
                        "type": "default",
                        "url": link.url.render_url(job),
                    })
                })
                .collect();
            json!({ "tag": "action", "actions": buttons })
        });

        let non_empty = |text: &Option<String>| {
            text.as_deref()
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(|t| Cuttable::new(t.to_string()))
        };
        let labels = (!job.labels.is_empty()).then(|| {
            let mut pairs: Vec<String> =
                job.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
            pairs.sort();
            Cuttable::new(pairs.join(", "))
        });

        Card {
            header,
            short_fields,
            links,
            reason: non_empty(&job.reason),
            message: non_empty(&job.message),
            labels,
            signature: signature.cloned(),
        }
    }

    /// Cuttable part `n`: 0 message, 1 reason, 2 labels.
    fn cuttable(&mut self, n: usize) -> Option<&mut Cuttable> {
        match n {
            0 => self.message.as_mut(),
            1 => self.reason.as_mut(),
            2 => self.labels.as_mut(),
            _ => None,
        }
    }

    /// The body with cuttable part `n` cut to `keep` bytes.
    fn bytes_with_cut(&mut self, n: usize, keep: usize) -> Vec<u8> {
        if let Some(text) = self.cuttable(n) {
            text.cut_to(keep);
        }
        self.to_bytes()
    }

    fn to_value(&self) -> Value {
        let mut elements = vec![json!({ "tag": "div", "fields": self.short_fields })];
        let long_fields: Vec<Value> = [
            ("Reason", &self.reason),
            ("Message", &self.message),
            ("Labels", &self.labels),
        ]
        .into_iter()
        .filter_map(|(label, text)| text.as_ref().map(|t| field(label, &t.shown(), false)))
        .collect();
        if !long_fields.is_empty() {
            elements.push(json!({ "tag": "div", "fields": long_fields }));
        }
        if let Some(links) = &self.links {
            elements.push(links.clone());
        }
        let mut body = json!({
            "msg_type": "interactive",
            "card": {
                "config": { "wide_screen_mode": true },
                "header": self.header,
                "elements": elements,
            },
        });
        if let Some(signature) = &self.signature {
            body["timestamp"] = json!(signature.timestamp.to_string());
            body["sign"] = json!(signature.sign);
        }
        body
    }

    fn to_bytes(&self) -> Vec<u8> {
        // Serializing a `Value` cannot fail: its keys are strings.
        serde_json::to_vec(&self.to_value()).unwrap_or_default()
    }
}

/// A digest's card: the facts as short fields and the jobs listed, at most
/// [`MAX_BODY_BYTES`] (the list is cut with a mark to fit).
pub fn digest_body(message: &Message, signature: Option<&Signature>) -> Result<Vec<u8>, String> {
    let template = phase_from_name(message.phase).map_or("grey", colour);
    fit(message, MAX_BODY_BYTES, |m| {
        let facts: Vec<Value> = m
            .facts
            .iter()
            .map(|(label, value)| field(label, value, true))
            .collect();
        let jobs = field("Jobs", m.detail.as_deref().unwrap_or(""), false);
        let mut body = json!({
            "msg_type": "interactive",
            "card": {
                "config": { "wide_screen_mode": true },
                "header": {
                    "title": { "tag": "plain_text", "content": feishu_plain_text(&m.title) },
                    "template": template,
                },
                "elements": [
                    { "tag": "div", "fields": facts },
                    { "tag": "div", "fields": [jobs] },
                ],
            },
        });
        if let Some(signature) = signature {
            body["timestamp"] = json!(signature.timestamp.to_string());
            body["sign"] = json!(signature.sign);
        }
        serde_json::to_vec(&body).unwrap_or_default()
    })
}

/// A fleet event's card: red for trouble beginning (`cluster-offline`, `rule-firing`), green
/// for its end (`cluster-online`, `rule-resolved`); the cluster, for rule events the rule with
/// its value and threshold, since when and when, as short fields; the summary below them (cut
/// with a mark if the body would pass [`MAX_BODY_BYTES`]).
pub fn fleet_body(
    event: &FleetEvent,
    settings: &Settings,
    signature: Option<&Signature>,
) -> Result<Vec<u8>, String> {
    let template = if fleet_is_trouble(event.kind) {
        "red"
    } else {
        "green"
    };
    fit(&Message::fleet(event, settings), MAX_BODY_BYTES, |m| {
        let facts: Vec<Value> = m
            .facts
            .iter()
            .map(|(label, value)| field(label, value, true))
            .collect();
        let mut elements = vec![json!({ "tag": "div", "fields": facts })];
        if let Some(summary) = &m.detail {
            elements.push(json!({ "tag": "div", "fields": [field("Summary", summary, false)] }));
        }
        let mut body = json!({
            "msg_type": "interactive",
            "card": {
                "config": { "wide_screen_mode": true },
                "header": {
                    "title": { "tag": "plain_text", "content": feishu_plain_text(&m.title) },
                    "template": template,
                },
                "elements": elements,
            },
        });
        if let Some(signature) = signature {
            body["timestamp"] = json!(signature.timestamp.to_string());
            body["sign"] = json!(signature.sign);
        }
        serde_json::to_vec(&body).unwrap_or_default()
    })
}

/// A `lark_md` field: the label in bold, the value neutralised on the next line.
fn field(label: &str, value: &str, short: bool) -> Value {
    json!({
        "is_short": short,
        "text": { "tag": "lark_md", "content": format!("**{label}**\n{}", feishu_lark_md(value)) },
    })
}

/// `failed`, or `succeeded (Completed)` when the kind's own word says more.
fn phase_text(job: &JobEvent) -> String {
    let name = phase_name(job.phase);
    if job.raw_phase.is_empty() || job.raw_phase.eq_ignore_ascii_case(name) {
        name.to_string()
    } else {
        format!("{name} ({})", job.raw_phase)
    }
}

/// `PyTorchJob (kubeflow.org/v1)`: the API group tells a Volcano `Job` from a batch one.
fn kind_text(job: &JobEvent) -> String {
    if job.api_version.is_empty() {
        job.kind.clone()
    } else {
        format!("{} ({})", job.kind, job.api_version)
    }
}

/// The card header colour (one of Feishu's header templates), chosen so the outcome is readable
/// at a glance: green done, red failed, orange in trouble, blue busy, grey the rest.
pub fn colour(phase: Phase) -> &'static str {
    match phase {
        Phase::Running => "blue",
        Phase::Succeeded => "green",
        Phase::Failed => "red",
        Phase::Restarting | Phase::Preempted => "orange",
        Phase::Pending
        | Phase::Queued
        | Phase::Suspended
        | Phase::Unknown
        | Phase::Terminating
        | Phase::Deleted => "grey",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jobrelay_notify::job::sample;

    fn settings(extra: &[(&str, &str)]) -> Settings {
        let mut config = vec![(
            "webhook".to_string(),
            "https://open.feishu.cn/open-apis/bot/v2/hook/tok-123456".to_string(),
        )];
        config.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        config.sort();
        Settings::from_config(&config, &<crate::Feishu as jobrelay_notify::Provider>::KEYS)
            .expect("valid config")
    }

    fn parse(bytes: &[u8]) -> Value {
        serde_json::from_slice(bytes).expect("the body is JSON")
    }

    /// Every `lark_md` content of the card, in order.
    fn texts(body: &Value) -> Vec<String> {
        body["card"]["elements"]
            .as_array()
            .expect("elements")
            .iter()
            .filter_map(|e| e["fields"].as_array())
            .flatten()
            .map(|f| f["text"]["content"].as_str().expect("content").to_string())
            .collect()
    }

    #[test]
    fn card_shape() {
        let body = parse(&body(&sample(), &settings(&[]), None).expect("fits"));
        assert_eq!(body["msg_type"], "interactive");
        assert_eq!(body["card"]["config"]["wide_screen_mode"], true);
        assert_eq!(
            body["card"]["header"]["title"],
            json!({ "tag": "plain_text", "content": "PyTorchJob ml/llama-finetune: failed" })
        );
        assert_eq!(body["card"]["header"]["template"], "red");
        assert_eq!(
            texts(&body),
            [
                "**Cluster**\neast",
                "**Namespace**\nml",
                "**Job**\nllama-finetune",
                "**Kind**\nPyTorchJob (kubeflow.org/v1)",
                "**Phase**\nfailed",
                "**Duration**\n1h 2m 3s",
                "**Reason**\nBackoffLimitExceeded",
                "**Message**\nworker-0 exited with code 137",
                "**Labels**\nteam=nlp",
            ]
        );
        let first = &body["card"]["elements"][0]["fields"][0];
        assert_eq!(first["is_short"], true);
        assert_eq!(first["text"]["tag"], "lark_md");
        assert_eq!(body["card"]["elements"][1]["fields"][0]["is_short"], false);
        assert!(body.get("timestamp").is_none() && body.get("sign").is_none());
    }

    #[test]
    fn a_jobs_story_is_shown_as_text() {
        use jobrelay_guest::story::{FailureCause, JobStory, Preemption, QueueState, Workload};
        jobrelay_notify::job::tell(Some(JobStory {
            workload: Some(Workload {
                state: QueueState::Evicted,
                reason: "Preempted".to_string(),
                message: String::new(),
                preempted: Some(Preemption {
                    reason: "**BOLD** [x](http://evil.example)".to_string(),
                    message: String::new(),
                }),
                cluster_queue: Some("gpu".to_string()),
                local_queue: Some("team-a".to_string()),
                waiting_since: None,
                admitted_at: None,
                past_execution_seconds: 0,
                evictions: Vec::new(),
                requeues: 0,
                accelerators: Vec::new(),
            }),
            failure: Some(FailureCause {
                container: "trainer".to_string(),
                init: false,
                reason: "OOMKilled".to_string(),
                exit_code: Some(137),
                last_reason: None,
                message: None,
            }),
        }));
        let body = parse(&body(&sample(), &settings(&[]), None).expect("fits"));
        jobrelay_notify::job::tell(None);
        let texts = texts(&body);
        assert!(
            texts.contains(&"**Queue**\nteam-a → gpu".to_string()),
            "{texts:?}"
        );
        assert!(
            texts.contains(&"**Failure**\ntrainer: OOMKilled, exit 137".to_string()),
            "{texts:?}"
        );
        let state = texts
            .iter()
            .find(|t| t.starts_with("**Queue state**"))
            .expect("the queue state");
        assert!(
            !state.contains("**BOLD**") && !state.contains("](http"),
            "job text never becomes lark_md: {state}"
        );
    }

    #[test]
    fn optional_parts_are_left_out() {
        let mut job = sample();
        job.reason = None;
        job.message = Some("  ".to_string());
        job.labels.clear();
        job.object_json = "{}".to_string();
        job.phase = Phase::Succeeded;
        job.raw_phase = "Completed".to_string();
        let body = parse(&body(&job, &settings(&[]), None).expect("fits"));
        let texts = texts(&body);
        assert_eq!(texts.len(), 5, "{texts:?}");
        assert_eq!(texts[4], "**Phase**\nsucceeded (Completed)");
        assert_eq!(body["card"]["elements"].as_array().map(Vec::len), Some(1));
        assert_eq!(body["card"]["header"]["template"], "green");
    }

    #[test]
    fn links_become_buttons_with_encoded_values() {
        let mut job = sample();
        job.name = "a&b".to_string();
        let settings = settings(&[
            (
                "link.Dashboard",
                "https://grafana.example/d/jobs?var-ns={namespace}&var-job={name}",
            ),
            ("title", "{name} is {phase} ({raw_phase})"),
        ]);
        let body = parse(&body(&job, &settings, None).expect("fits"));
        assert_eq!(
            body["card"]["header"]["title"]["content"],
            "a&b is failed (Failed)"
        );
        let action = &body["card"]["elements"][2];
        assert_eq!(action["tag"], "action");
        assert_eq!(
            action["actions"][0],
            json!({
                "tag": "button",
                "text": { "tag": "plain_text", "content": "Dashboard" },
                "type": "default",
                "url": "https://grafana.example/d/jobs?var-ns=ml&var-job=a%26b",
            })
        );
    }

    #[test]
    fn markup_in_values_is_escaped() {
        let mut job = sample();
        job.message = Some("<at id=all></at> & more".to_string());
        let body = parse(&body(&job, &settings(&[]), None).expect("fits"));
        assert!(
            texts(&body)
                .contains(&"**Message**\n&lt;at id=all&gt;&lt;/at&gt; &amp; more".to_string())
        );
    }

    #[test]
    fn signature_fields_are_top_level() {
        let signature = Signature {
            timestamp: 1_700_000_000,
            sign: "c2lnbg==".to_string(),
        };
        let body = parse(&body(&sample(), &settings(&[]), Some(&signature)).expect("fits"));
        assert_eq!(body["timestamp"], "1700000000");
        assert_eq!(body["sign"], "c2lnbg==");
    }

    #[test]
    fn long_message_is_cut_to_fit() {
        let mut job = sample();
        // Multi-byte characters and characters that grow when escaped, so the cut must land on
        // a boundary and account for escaping.
        job.message = Some("é<&".repeat(10_000));
        let signature = Signature {
            timestamp: 1_700_000_000,
            sign: "x".repeat(44),
        };
        let bytes = body(&job, &settings(&[]), Some(&signature)).expect("fits after cutting");
        assert!(bytes.len() <= MAX_BODY_BYTES, "{} bytes", bytes.len());
        assert!(
            bytes.len() > MAX_BODY_BYTES - 20,
            "not cut more than needed"
        );
        let body = parse(&bytes);
        let message = texts(&body)
            .into_iter()
            .find(|t| t.starts_with("**Message**"))
            .expect("message kept");
        assert!(message.ends_with(TRUNCATED), "{message}");
        assert!(texts(&body).contains(&"**Reason**\nBackoffLimitExceeded".to_string()));
    }

    #[test]
    fn reason_then_labels_are_cut_when_the_message_is_not_enough() {
        let mut job = sample();
        job.message = Some("short".to_string());
        job.reason = Some("r".repeat(15_000));
        job.labels = (0..800)
            .map(|i| (format!("label-{i:03}"), "v".repeat(20)))
            .collect();
        let bytes = body(&job, &settings(&[]), None).expect("fits after cutting");
        assert!(bytes.len() <= MAX_BODY_BYTES);
        assert!(
            bytes.len() > MAX_BODY_BYTES - 100,
            "not cut more than needed"
        );
        let texts = texts(&parse(&bytes));
        let find = |label: &str| {
            texts
                .iter()
                .find(|t| t.starts_with(label))
                .cloned()
                .expect("field kept")
        };
        assert_eq!(find("**Message**"), format!("**Message**\n{TRUNCATED}"));
        assert_eq!(find("**Reason**"), format!("**Reason**\n{TRUNCATED}"));
        assert!(find("**Labels**").ends_with(TRUNCATED));
        assert!(find("**Labels**").starts_with("**Labels**\nlabel-000=v"));
    }

    #[test]
    fn small_cards_are_untouched() {
        let bytes = body(&sample(), &settings(&[]), None).expect("fits");
        assert!(!String::from_utf8_lossy(&bytes).contains(TRUNCATED));
    }

    #[test]
    fn an_oversized_title_is_an_error() {
        let title = "{name}".repeat(200) + &"t".repeat(MAX_BODY_BYTES);
        let error = body(&sample(), &settings(&[("title", &title)]), None).expect_err("too big");
        assert!(error.contains("shorten `title`"), "{error}");
    }

    #[test]
    fn colours() {
        assert_eq!(colour(Phase::Running), "blue");
        assert_eq!(colour(Phase::Succeeded), "green");
        assert_eq!(colour(Phase::Failed), "red");
        assert_eq!(colour(Phase::Restarting), "orange");
        assert_eq!(colour(Phase::Preempted), "orange");
        for grey in [
            Phase::Pending,
            Phase::Queued,
            Phase::Suspended,
            Phase::Unknown,
            Phase::Terminating,
            Phase::Deleted,
        ] {
            assert_eq!(colour(grey), "grey");
        }
    }

    #[test]
    fn an_offline_cluster_is_a_red_card_naming_it_since_when_and_why() {
        let event = jobrelay_notify::fleet::sample_offline();
        let body = parse(&fleet_body(&event, &settings(&[]), None).expect("fits"));
        assert_eq!(body["msg_type"], "interactive");
        assert_eq!(body["card"]["config"]["wide_screen_mode"], true);
        assert_eq!(
            body["card"]["header"],
            json!({
                "title": { "tag": "plain_text", "content": "Cluster east is offline" },
                "template": "red",
            })
        );
        assert_eq!(
            texts(&body),
            vec![
                "**Cluster**\neast",
                "**Since**\n2026-11-28T10:00:00Z",
                "**At**\n2026-11-28T10:00:30Z",
                "**Summary**\nGET /version: connection refused",
            ]
        );
        let fields = body["card"]["elements"][0]["fields"]
            .as_array()
            .expect("short fields");
        assert!(fields.iter().all(|f| f["is_short"] == true));
        assert_eq!(body["card"]["elements"][1]["fields"][0]["is_short"], false);
        assert!(body.get("sign").is_none(), "unsigned without a secret");
    }

    #[test]
    fn a_firing_rule_is_red_with_value_and_threshold_and_its_end_is_green() {
        let firing = jobrelay_notify::fleet::sample_firing();
        let body = parse(&fleet_body(&firing, &settings(&[]), None).expect("fits"));
        assert_eq!(
            body["card"]["header"]["title"]["content"],
            "Rule failure-ratio is firing on east"
        );
        assert_eq!(body["card"]["header"]["template"], "red");
        assert_eq!(
            texts(&body),
            vec![
                "**Cluster**\neast",
                "**Rule**\nfailure-ratio",
                "**Value**\n0.31",
                "**Threshold**\n0.15",
                "**Since**\n2026-11-28T10:00:00Z",
                "**At**\n2026-11-28T10:02:00Z",
                "**Summary**\njob failure ratio 0.31 &gt; 0.15 for 2m on east, kinds: batch-job",
            ]
        );

        let mut resolved = firing.clone();
        resolved.kind = jobrelay_notify::fleet::FleetEventKind::RuleResolved;
        let body = parse(&fleet_body(&resolved, &settings(&[]), None).expect("fits"));
        assert_eq!(body["card"]["header"]["template"], "green");
        assert_eq!(
            body["card"]["header"]["title"]["content"],
            "Rule failure-ratio resolved on east"
        );
        let mut online = jobrelay_notify::fleet::sample_offline();
        online.kind = jobrelay_notify::fleet::FleetEventKind::ClusterOnline;
        let body = parse(&fleet_body(&online, &settings(&[]), None).expect("fits"));
        assert_eq!(body["card"]["header"]["template"], "green");
        assert_eq!(
            body["card"]["header"]["title"]["content"],
            "Cluster east is back online"
        );
        // A cluster event names no rule, even if one came along.
        assert!(!texts(&body).iter().any(|t| t.starts_with("**Rule**")));
    }

    #[test]
    fn fleet_cards_are_signed_escaped_and_fit() {
        let mut event = jobrelay_notify::fleet::sample_offline();
        event.summary = format!("<at id=all></at> {}", "é<&".repeat(10_000));
        let signature = Signature {
            timestamp: 1_700_000_000,
            sign: "c2lnbg==".to_string(),
        };
        let bytes = fleet_body(&event, &settings(&[]), Some(&signature)).expect("fits");
        assert!(bytes.len() <= MAX_BODY_BYTES, "{} bytes", bytes.len());
        let body = parse(&bytes);
        assert_eq!(body["timestamp"], "1700000000");
        assert_eq!(body["sign"], "c2lnbg==");
        let summary = texts(&body)
            .into_iter()
            .find(|t| t.starts_with("**Summary**"))
            .expect("summary kept");
        assert!(
            summary.starts_with("**Summary**\n&lt;at id=all&gt;"),
            "{summary}"
        );
        assert!(summary.ends_with(TRUNCATED), "{summary}");
    }

    /// The request the plugin makes for a fleet event: to the default bot, signed in the body
    /// like a job card, whatever routes say.
    #[test]
    fn fleet_events_go_to_the_default_bot_signed() {
        use jobrelay_notify::testing;
        let notifier = testing::notifier::<crate::Feishu>(
            "https://open.feishu.cn/open-apis/bot/v2/hook/tok-123456",
            &[
                ("secret", "demo-secret"),
                ("route.1.namespace", "*"),
                (
                    "route.1.webhook",
                    "https://open.feishu.cn/open-apis/bot/v2/hook/other-654321",
                ),
            ],
        )
        .expect("valid");
        let (url, body) = testing::fleet_request(
            &notifier,
            &jobrelay_notify::fleet::sample_offline(),
            1_599_360_473_000,
        )
        .expect("a request");
        assert_eq!(
            url,
            "https://open.feishu.cn/open-apis/bot/v2/hook/tok-123456"
        );
        assert_eq!(body["timestamp"], "1599360473");
        assert_eq!(
            body["sign"],
            crate::sign::sign(1_599_360_473, "demo-secret")
        );
        assert_eq!(body["card"]["header"]["template"], "red");
    }

    #[test]
    fn digest_cards_list_the_jobs_and_fit() {
        let settings = settings(&[]);
        let job = sample();
        let lines: Vec<String> = (0..2000)
            .map(|n| format!("PyTorchJob job-{n} (east)"))
            .collect();
        let digest = Message::digest(&job, &lines, &settings);
        let signature = Signature {
            timestamp: 1,
            sign: "s".to_string(),
        };
        let bytes = digest_body(&digest, Some(&signature)).expect("fits");
        assert!(bytes.len() <= MAX_BODY_BYTES);
        let body: Value = serde_json::from_slice(&bytes).expect("JSON");
        assert_eq!(
            body["card"]["header"]["title"]["content"],
            "2000 jobs failed in ml"
        );
        assert_eq!(body["card"]["header"]["template"], "red");
        assert_eq!(body["sign"], "s");
        let text = body.to_string();
        assert!(
            text.contains("job-0 (east)") && text.contains("…(truncated)"),
            "{text}"
        );
    }
}
