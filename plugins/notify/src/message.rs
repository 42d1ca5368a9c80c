//! The message about one job event (or a digest of several, or a fleet event), before any
//! service's format: what every chat notifier says, so the providers differ only in how they
//! lay it out.
//!
//! Values from the cluster (names, reasons, a failing job's message) are untrusted text: a job
//! message could carry `<@all>` or `<!channel>` and page a whole company. A message keeps them
//! as they came; each provider passes every one through its service's neutraliser
//! ([`crate::markup`]) as it lays the message out, so such text shows as written and never acts.
//!
//! Services cap a message's size (DingTalk a 20 KB body, WeCom 4,096 bytes of markdown, Slack
//! 3,000 characters a section), and a failing job's message can be longer on its own. Rather
//! than lose the notification, [`fit`] cuts the free text — the job's message first, then the
//! reason, then the labels — at a character boundary with a visible mark, until it fits.

use jobrelay_guest::phase_name;

use crate::config::Settings;
use crate::duration::run_time;
use crate::fleet::{self, FleetEvent};
use crate::job::{JobEvent, JobStory, Phase};

/// Appended where text was cut.
pub const TRUNCATED: &str = "…(truncated)";

/// One job event as a notification says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The rendered `title`.
    pub title: String,
    /// The normalised phase's name (`failed`), or a fleet event's state (`offline`, `online`,
    /// `firing`, `resolved`): what a provider colours the message by.
    pub phase: &'static str,
    /// Short facts, shown as a list: label and value.
    pub facts: Vec<(&'static str, String)>,
    /// Why the job is in this phase (`BackoffLimitExceeded`).
    pub reason: Option<String>,
    /// The job's own message (a stack trace, a log tail): the longest part, cut first.
    pub detail: Option<String>,
    /// `key=value` pairs, comma-separated.
    pub labels: Option<String>,
    /// Configured `link.<label>` buttons: label and rendered URL.
    pub links: Vec<(String, String)>,
    /// Whether the configured people are mentioned (the phase is in `mention_phases`).
    pub mention: bool,
}

/// What a job's story adds to its message: where it is in its Kueue queue and what Kueue
/// did to it, and why its pods failed (`docs/job-kinds.md`, "A job's story"). Text from the
/// cluster, laid out by each provider through its neutraliser like every other fact.
pub fn story_facts(story: &JobStory) -> Vec<(&'static str, String)> {
    use jobrelay_guest::story::QueueState;
    let mut facts = Vec::new();
    if let Some(w) = &story.workload {
        let queue = match (&w.local_queue, &w.cluster_queue) {
            (Some(local), Some(cluster)) => Some(format!("{local} → {cluster}")),
            (Some(one), None) | (None, Some(one)) => Some(one.clone()),
            (None, None) => None,
        };
        if let Some(queue) = queue {
            facts.push(("Queue", queue));
        }
        let said = |what: &str, why: &str| {
            if why.is_empty() {
                what.to_string()
            } else {
                format!("{what} ({why})")
            }
        };
        let state = match (w.state, &w.preempted) {
            (QueueState::Evicted, Some(p)) => said("preempted", &p.reason),
            (QueueState::Evicted, None) => said("evicted", &w.reason),
            (QueueState::Queued, _) => {
                let since = w.waiting_since.as_deref().map(|t| format!(" since {t}"));
                format!(
                    "{}{}",
                    said("waiting for quota", &w.reason),
                    since.unwrap_or_default()
                )
            }
            (QueueState::Reserved, _) => "quota reserved".to_string(),
            (QueueState::Admitted, _) => "admitted".to_string(),
            (QueueState::Finished, _) => said("finished", &w.reason),
        };
        facts.push(("Queue state", state));
        let preemptions = jobrelay_guest::story::preemptions(&w.evictions);
        if preemptions > 0 {
            facts.push(("Preemptions", preemptions.to_string()));
        }
    }
    if let Some(f) = &story.failure {
        let mut cause = if f.container.is_empty() {
            f.reason.clone()
        } else {
            format!("{}: {}", f.container, f.reason)
        };
        if let Some(last) = &f.last_reason {
            cause.push_str(&format!(" (last {last})"));
        }
        if let Some(code) = f.exit_code {
            cause.push_str(&format!(", exit {code}"));
        }
        facts.push(("Failure", cause));
    }
    facts
}

impl Message {
    pub fn of(job: &JobEvent, settings: &Settings) -> Message {
        let phase = phase_name(job.phase);
        let mut facts = vec![
            ("Job", format!("{}/{}", job.namespace, job.name)),
            ("Kind", job.kind.clone()),
            ("Cluster", job.cluster.clone()),
        ];
        let phase_text = if job.raw_phase.is_empty() || job.raw_phase.eq_ignore_ascii_case(phase) {
            phase.to_string()
        } else {
            format!("{phase} ({})", job.raw_phase)
        };
        facts.push(("Phase", phase_text));
        if let Some(took) = run_time(&job.object_json, &job.transition_time) {
            facts.push(("Run time", took));
        }
        facts.push(("At", job.transition_time.clone()));
        if let Some(story) = crate::job::story() {
            facts.extend(story_facts(&story));
        }
        let labels = (!job.labels.is_empty()).then(|| {
            job.labels
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(", ")
        });
        Message {
            title: settings.title.render(job),
            phase,
            facts,
            reason: job.reason.clone().filter(|r| !r.is_empty()),
            detail: job.message.clone().filter(|m| !m.is_empty()),
            labels,
            links: settings
                .links
                .iter()
                .map(|link| (link.label.clone(), link.url.render_url(job)))
                .collect(),
            mention: settings.mentions.apply_to(job),
        }
    }

    /// How a digest lists `job`: kind, name, cluster and reason (the namespace and phase are
    /// the digest's own).
    pub fn line(job: &JobEvent) -> String {
        let reason = job
            .reason
            .as_deref()
            .filter(|r| !r.is_empty())
            .map(|r| format!(": {r}"))
            .unwrap_or_default();
        format!("{} {} ({}){reason}", job.kind, job.name, job.cluster)
    }

    /// One message for several jobs of `job`'s namespace that reached its phase: the digest
    /// of a window, listing `lines`.
    pub fn digest(job: &JobEvent, lines: &[String], settings: &Settings) -> Message {
        let phase = phase_name(job.phase);
        Message {
            title: format!("{} jobs {phase} in {}", lines.len(), job.namespace),
            phase,
            facts: vec![
                ("Namespace", job.namespace.clone()),
                ("Phase", phase.to_string()),
                ("Jobs", lines.len().to_string()),
            ],
            reason: None,
            detail: Some(lines.join("\n")),
            labels: None,
            links: Vec::new(),
            mention: settings.mentions.apply_to(job),
        }
    }

    /// A fleet event: its own title, the cluster (and for rule events the rule, value and
    /// threshold), since when, and the summary as the free text (cut first, as a job's message
    /// is). No links: the `link.*` templates are made of a job's fields. It mentions the
    /// configured people when it reports trouble (`cluster-offline`, `rule-firing`) and
    /// `mention_phases` includes `failed`, as a failed job would.
    pub fn fleet(event: &FleetEvent, settings: &Settings) -> Message {
        let mentions = &settings.mentions;
        Message {
            title: fleet::title(event),
            phase: fleet::state(event.kind),
            facts: fleet::facts(event),
            reason: None,
            detail: Some(event.summary.clone()).filter(|s| !s.trim().is_empty()),
            labels: None,
            links: Vec::new(),
            mention: fleet::fleet_is_trouble(event.kind)
                && (!mentions.users.is_empty() || !mentions.mobiles.is_empty())
                && mentions.phases.contains(&Phase::Failed),
        }
    }

    /// The free-text parts, in the order they are cut.
    fn cuttable(&mut self, part: usize) -> Option<&mut String> {
        match part {
            0 => self.detail.as_mut(),
            1 => self.reason.as_mut(),
            2 => self.labels.as_mut(),
            _ => None,
        }
    }
}

/// `render(message)` at most `max` bytes long, cutting free text as needed; an error when even
/// without any free text it is longer (an enormous title or link list).
pub fn fit(
    message: &Message,
    max: usize,
    render: impl Fn(&Message) -> Vec<u8>,
) -> Result<Vec<u8>, String> {
    let mut message = message.clone();
    let mut bytes = render(&message);
    for part in 0..3 {
        if bytes.len() <= max {
            return Ok(bytes);
        }
        let Some(text) = message.cuttable(part).cloned() else {
            continue;
        };
        let chars: Vec<char> = text.chars().collect();
        let cut = |n: usize, message: &mut Message| {
            if let Some(slot) = message.cuttable(part) {
                *slot = chars[..n].iter().collect::<String>() + TRUNCATED;
            }
        };
        // The longest prefix that fits, searched for: escaping makes the rendered size grow
        // unevenly with the text. When not even the mark alone fits, the part stays cut to it
        // and the next part is cut too.
        let (mut low, mut high) = (0, chars.len());
        while low < high {
            let mid = (low + high).div_ceil(2);
            cut(mid, &mut message);
            if render(&message).len() <= max {
                low = mid;
            } else {
                high = mid - 1;
            }
        }
        cut(low, &mut message);
        bytes = render(&message);
    }
    if bytes.len() <= max {
        Ok(bytes)
    } else {
        Err(format!(
            "the message is {} bytes even with the job's free text cut, over the service's \
             {max}; shorten `title` or the `link.*` list",
            bytes.len()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Keys, Settings};
    use crate::job::sample;

    fn settings(pairs: &[(&str, &str)]) -> Settings {
        let mut config: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        config.sort();
        let keys = Keys {
            signed: false,
            mentions: true,
            own: &[],
        };
        Settings::from_config(&config, &keys).expect("valid")
    }

    fn render(message: &Message) -> Vec<u8> {
        format!(
            "{}|{}|{}|{}",
            message.title,
            message.detail.as_deref().unwrap_or(""),
            message.reason.as_deref().unwrap_or(""),
            message.labels.as_deref().unwrap_or("")
        )
        .into_bytes()
    }

    #[test]
    fn says_what_happened() {
        let settings = settings(&[
            ("webhook", "https://chat.example/hook/abcdefgh"),
            ("mention", "alice"),
            ("link.Logs", "https://logs.example/?job={name}"),
        ]);
        let message = Message::of(&sample(), &settings);
        assert_eq!(message.title, "PyTorchJob ml/llama-finetune: failed");
        assert_eq!(message.phase, "failed");
        assert!(
            message
                .facts
                .contains(&("Job", "ml/llama-finetune".to_string()))
        );
        assert!(message.facts.contains(&("Phase", "failed".to_string())));
        assert!(
            message
                .facts
                .contains(&("Run time", "1h 2m 3s".to_string()))
        );
        assert_eq!(message.reason.as_deref(), Some("BackoffLimitExceeded"));
        assert_eq!(message.labels.as_deref(), Some("team=nlp"));
        assert_eq!(
            message.links,
            vec![(
                "Logs".to_string(),
                "https://logs.example/?job=llama-finetune".to_string()
            )]
        );
        assert!(message.mention);
    }

    #[test]
    fn a_jobs_story_adds_its_queue_and_its_failure() {
        use jobrelay_guest::story::{FailureCause, Preemption, QueueState, Workload};
        let settings = settings(&[("webhook", "https://chat.example/hook/abcdefgh")]);
        let workload = |state, preempted| Workload {
            state,
            reason: "Preempted".to_string(),
            message: String::new(),
            preempted,
            cluster_queue: Some("gpu".to_string()),
            local_queue: Some("team-a".to_string()),
            waiting_since: Some("2026-12-02T10:00:00+00:00".to_string()),
            admitted_at: None,
            past_execution_seconds: 0,
            evictions: vec![("Preempted".to_string(), 2)],
            requeues: 2,
            accelerators: Vec::new(),
        };
        crate::job::tell(Some(JobStory {
            workload: Some(workload(
                QueueState::Evicted,
                Some(Preemption {
                    reason: "InCohortReclamation".to_string(),
                    message: String::new(),
                }),
            )),
            failure: Some(FailureCause {
                container: "trainer".to_string(),
                init: false,
                reason: "CrashLoopBackOff".to_string(),
                exit_code: Some(137),
                last_reason: Some("OOMKilled".to_string()),
                message: None,
            }),
        }));
        let message = Message::of(&sample(), &settings);
        crate::job::tell(None);
        for fact in [
            ("Queue", "team-a → gpu"),
            ("Queue state", "preempted (InCohortReclamation)"),
            ("Preemptions", "2"),
            (
                "Failure",
                "trainer: CrashLoopBackOff (last OOMKilled), exit 137",
            ),
        ] {
            assert!(
                message.facts.contains(&(fact.0, fact.1.to_string())),
                "{fact:?} in {:?}",
                message.facts
            );
        }
        // Without a story, none of them.
        let plain = Message::of(&sample(), &settings);
        assert!(
            !plain
                .facts
                .iter()
                .any(|(label, _)| label.starts_with("Queue"))
        );
        // A job waiting for quota says since when.
        let mut queued = workload(QueueState::Queued, None);
        queued.reason = "Pending".to_string();
        queued.evictions.clear();
        let facts = story_facts(&JobStory {
            workload: Some(queued),
            failure: None,
        });
        assert!(facts.contains(&(
            "Queue state",
            "waiting for quota (Pending) since 2026-12-02T10:00:00+00:00".to_string()
        )));
    }

    #[test]
    fn fits_by_cutting_free_text_in_order() {
        let settings = settings(&[("webhook", "https://chat.example/hook/abcdefgh")]);
        let mut job = sample();
        job.message = Some("x".repeat(5000));
        let message = Message::of(&job, &settings);
        let whole = render(&message).len();
        let fitted = fit(&message, 200, render).expect("fits");
        assert!(
            fitted.len() <= 200 && fitted.len() > 150,
            "{}",
            fitted.len()
        );
        let text = String::from_utf8(fitted).expect("utf-8");
        assert!(text.contains(TRUNCATED), "{text}");
        assert!(
            text.contains("BackoffLimitExceeded"),
            "the reason is kept: {text}"
        );
        assert!(whole > 5000);
        // Untouched when it fits.
        assert_eq!(fit(&message, whole, render).expect("fits").len(), whole);
        // Nothing left to cut: an error saying what to shorten.
        let error = fit(&message, 10, render).expect_err("too small");
        assert!(error.contains("title"), "{error}");
    }

    #[test]
    fn digests_list_the_jobs() {
        let settings = settings(&[
            ("webhook", "https://chat.example/hook/abcdefgh"),
            ("mention", "alice"),
        ]);
        let job = sample();
        let lines = vec![Message::line(&job), "PyTorchJob other (west)".to_string()];
        assert_eq!(
            lines[0],
            "PyTorchJob llama-finetune (east): BackoffLimitExceeded"
        );
        let digest = Message::digest(&job, &lines, &settings);
        assert_eq!(digest.title, "2 jobs failed in ml");
        assert!(digest.facts.contains(&("Jobs", "2".to_string())));
        assert_eq!(digest.detail.as_deref(), Some(lines.join("\n").as_str()));
        assert!(digest.mention);
    }

    #[test]
    fn fleet_events_say_what_happened_to_the_cluster() {
        let settings = settings(&[
            ("webhook", "https://chat.example/hook/abcdefgh"),
            ("mention", "alice"),
            ("link.Logs", "https://logs.example/?job={name}"),
        ]);
        let firing = crate::fleet::sample_firing();
        let message = Message::fleet(&firing, &settings);
        assert_eq!(message.title, "Rule failure-ratio is firing on east");
        assert_eq!(message.phase, "firing");
        assert!(message.facts.contains(&("Threshold", "0.15".to_string())));
        assert_eq!(message.detail.as_deref(), Some(firing.summary.as_str()));
        assert!(message.links.is_empty(), "job links do not apply");
        assert!(message.mention, "trouble mentions like a failed job");

        let mut resolved = firing;
        resolved.kind = crate::fleet::FleetEventKind::RuleResolved;
        assert!(!Message::fleet(&resolved, &settings).mention);
        let quiet = self::settings(&[
            ("webhook", "https://chat.example/hook/abcdefgh"),
            ("mention", "alice"),
            ("mention_phases", "succeeded"),
        ]);
        let offline = crate::fleet::sample_offline();
        assert!(!Message::fleet(&offline, &quiet).mention);
    }
}
