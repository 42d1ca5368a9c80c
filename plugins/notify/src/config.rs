//! The manifest's `config` map, checked completely in `init`.
//!
//! Everything that can be wrong with the configuration is found here, when the host loads the
//! plugin version, so a bad version is refused before it takes an event. Errors name the key and
//! the problem but never echo a webhook or a secret: `init` errors are shown to operators and
//! logged, and both values are credentials.

use std::collections::BTreeMap;
use std::fmt;

use jobrelay_guest::{PHASES, phase_from_name, phase_name};

use crate::job::{self, JobEvent, Phase};
use crate::noise::{Noise, Quiet, parse_window};
use crate::template::Template;
use crate::webhook::Webhook;

/// Phases notified when `phases` is not set: the ones someone watching a job cares about.
pub const DEFAULT_PHASES: [Phase; 4] = [
    Phase::Running,
    Phase::Succeeded,
    Phase::Failed,
    Phase::Restarting,
];

/// Card title when `title` is not set.
pub const DEFAULT_TITLE: &str = "{kind} {namespace}/{name}: {phase}";

/// Phases whose messages mention people when `mention_phases` is not set.
pub const DEFAULT_MENTION_PHASES: [Phase; 1] = [Phase::Failed];

/// Which keys a provider understands beyond the ones every notifier has (`webhook`, `phases`,
/// `title`, `link.<label>`, `route.<n>.namespace|label|webhook`).
#[derive(Debug, Clone, Copy)]
pub struct Keys {
    /// Bots can have a signing secret: `secret`, `route.<n>.secret`.
    pub signed: bool,
    /// The service can mention people: `mention`, `mention_mobiles`, `mention_phases`.
    pub mentions: bool,
    /// The provider's own keys, handed to it in [`Settings::own`] to check.
    pub own: &'static [&'static str],
}

impl Keys {
    /// Every key, for "unknown key" errors.
    fn known(&self) -> String {
        let mut keys = vec!["webhook"];
        if self.signed {
            keys.push("secret");
        }
        keys.extend(["phases", "title", "link.<label>"]);
        if self.mentions {
            keys.extend(["mention", "mention_mobiles", "mention_phases"]);
        }
        keys.extend(self.own.iter().copied());
        keys.extend([
            "route.<n>.namespace",
            "route.<n>.label",
            "route.<n>.webhook",
        ]);
        if self.signed {
            keys.push("route.<n>.secret");
        }
        keys.join(", ")
    }
}

/// Who a message mentions, and on which phases.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Mentions {
    /// User ids (`all` for everyone), as the service names people.
    pub users: Vec<String>,
    /// Mobile numbers, for services that can mention by number.
    pub mobiles: Vec<String>,
    pub phases: Vec<Phase>,
}

impl Mentions {
    /// Whether a message about `job` mentions anyone.
    pub fn apply_to(&self, job: &JobEvent) -> bool {
        (!self.users.is_empty() || !self.mobiles.is_empty()) && self.phases.contains(&job.phase)
    }

    /// Whether `all` is among the users.
    pub fn everyone(&self) -> bool {
        self.users.iter().any(|u| u == "all")
    }
}

/// Where a card goes: one bot and its signing secret.
#[derive(Clone, PartialEq, Eq)]
pub struct Target {
    pub webhook: Webhook,
    pub secret: Option<String>,
}

impl Target {
    /// `text` without this target's token or secret; every outgoing message passes here.
    pub fn scrub(&self, text: &str) -> String {
        self.webhook.scrub(text, self.secret.as_deref())
    }
}

/// Shows the redacted URL and whether a secret is set, never the secret.
impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Target")
            .field("webhook", &self.webhook)
            .field("signed", &self.secret.is_some())
            .finish()
    }
}

/// A route's namespace condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NamespaceMatch {
    Exact(String),
    /// Written with a trailing `*`; `*` alone matches every namespace.
    Prefix(String),
}

impl NamespaceMatch {
    fn parse(key: &str, value: &str) -> Result<NamespaceMatch, String> {
        let value = value.trim();
        if value.is_empty() {
            return Err(format!("config `{key}` is empty"));
        }
        Ok(match value.strip_suffix('*') {
            Some(prefix) => NamespaceMatch::Prefix(prefix.to_string()),
            None => NamespaceMatch::Exact(value.to_string()),
        })
    }

    fn matches(&self, namespace: &str) -> bool {
        match self {
            NamespaceMatch::Exact(name) => namespace == name,
            NamespaceMatch::Prefix(prefix) => namespace.starts_with(prefix.as_str()),
        }
    }
}

/// One `route.<n>.*` group. Its conditions must all hold; a route without conditions matches
/// every job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub number: u32,
    pub namespace: Option<NamespaceMatch>,
    pub label: Option<(String, String)>,
    pub target: Target,
}

impl Route {
    fn matches(&self, job: &JobEvent) -> bool {
        let namespace_ok = self
            .namespace
            .as_ref()
            .is_none_or(|ns| ns.matches(&job.namespace));
        let label_ok = self
            .label
            .as_ref()
            .is_none_or(|(key, value)| job::label(job, key) == Some(value.as_str()));
        namespace_ok && label_ok
    }
}

/// A `link.<label>` button.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    pub label: String,
    pub url: Template,
}

/// The plugin's checked configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Where events no route claims go; without it they are skipped.
    pub default: Option<Target>,
    pub phases: Vec<Phase>,
    pub title: Template,
    /// In label order (the host hands the config sorted by key).
    pub links: Vec<Link>,
    /// In ascending `<n>` order: the order they are tried in.
    pub routes: Vec<Route>,
    /// Empty unless the provider has mentions and some are configured.
    pub mentions: Mentions,
    /// The provider's own keys with their values, in key order, for it to check.
    pub own: Vec<(String, String)>,
    /// The digest window and quiet hours.
    pub noise: Noise,
}

/// A route while its keys are being collected.
#[derive(Default)]
struct RouteDraft {
    namespace: Option<NamespaceMatch>,
    label: Option<(String, String)>,
    webhook: Option<Webhook>,
    secret: Option<String>,
}

impl Settings {
    /// Checks the whole map; the first problem found is the error.
    pub fn from_config(config: &[(String, String)], keys: &Keys) -> Result<Settings, String> {
        let mut webhook = None;
        let mut secret = None;
        let mut phases = None;
        let mut title = None;
        let mut links = Vec::new();
        let mut drafts: BTreeMap<u32, RouteDraft> = BTreeMap::new();
        let mut mentions = Mentions::default();
        let mut mention_phases = None;
        let mut own = Vec::new();
        let mut noise = Noise::default();
        let (mut quiet_hours, mut quiet_offset) = (None, None);
        let unknown = |key: &str| format!("unknown config key `{key}` (known: {})", keys.known());

        for (key, value) in config {
            match key.as_str() {
                "webhook" => webhook = Some(parse_webhook(key, value)?),
                "secret" if keys.signed => secret = Some(parse_secret(key, value)?),
                "phases" => phases = Some(parse_phases(key, value)?),
                "title" => {
                    title =
                        Some(Template::parse(value).map_err(|e| format!("config `title`: {e}"))?);
                }
                "mention" if keys.mentions => mentions.users = parse_list(key, value)?,
                "mention_mobiles" if keys.mentions => mentions.mobiles = parse_list(key, value)?,
                "mention_phases" if keys.mentions => {
                    mention_phases = Some(parse_phases(key, value)?);
                }
                "digest_window" => noise.digest_seconds = Some(parse_window(key, value)?),
                "quiet_hours" => quiet_hours = Some(value.as_str()),
                "quiet_utc_offset" => quiet_offset = Some(value.as_str()),
                _ if keys.own.contains(&key.as_str()) => own.push((key.clone(), value.clone())),
                _ => {
                    if let Some(label) = key.strip_prefix("link.") {
                        links.push(parse_link(key, label, value)?);
                    } else if let Some(rest) = key.strip_prefix("route.") {
                        add_route_key(&mut drafts, key, rest, value, keys)?;
                    } else {
                        return Err(unknown(key));
                    }
                }
            }
        }
        mentions.phases = mention_phases.unwrap_or_else(|| DEFAULT_MENTION_PHASES.to_vec());
        noise.quiet = match (quiet_hours, quiet_offset) {
            (Some(hours), offset) => Some(Quiet::parse(hours, offset)?),
            (None, Some(_)) => {
                return Err("config `quiet_utc_offset` is set but `quiet_hours` is not".into());
            }
            (None, None) => None,
        };

        let default = match (webhook, secret) {
            (Some(webhook), secret) => Some(Target { webhook, secret }),
            (None, Some(_)) => return Err("config `secret` is set but `webhook` is not".into()),
            (None, None) => None,
        };
        let mut routes = Vec::with_capacity(drafts.len());
        for (number, draft) in drafts {
            let webhook = draft.webhook.ok_or_else(|| {
                format!("config `route.{number}` has no `route.{number}.webhook`")
            })?;
            routes.push(Route {
                number,
                namespace: draft.namespace,
                label: draft.label,
                target: Target {
                    webhook,
                    secret: draft.secret,
                },
            });
        }
        if default.is_none() && routes.is_empty() {
            return Err("config needs `webhook`, or at least one `route.<n>.webhook`".into());
        }
        let title = match title {
            Some(title) => title,
            None => Template::parse(DEFAULT_TITLE)?,
        };
        Ok(Settings {
            default,
            phases: phases.unwrap_or_else(|| DEFAULT_PHASES.to_vec()),
            title,
            links,
            routes,
            mentions,
            own,
            noise,
        })
    }

    /// The provider's own key `key` read as one of `choices` (the first is the default);
    /// another value is an error naming the key and the choices.
    pub fn own_choice<T: Copy>(&self, key: &str, choices: &[(&str, T)]) -> Result<T, String> {
        let Some(value) = self.own(key).map(str::trim) else {
            return choices
                .first()
                .map(|(_, choice)| *choice)
                .ok_or_else(|| format!("config `{key}` has no choices"));
        };
        choices
            .iter()
            .find(|(name, _)| *name == value)
            .map(|(_, choice)| *choice)
            .ok_or_else(|| {
                let names: Vec<&str> = choices.iter().map(|(name, _)| *name).collect();
                format!(
                    "config `{key}`: `{value}` is not one of {}",
                    names.join(", ")
                )
            })
    }

    /// The value of the provider's own key `key`, if set.
    pub fn own(&self, key: &str) -> Option<&str> {
        self.own
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Whether the event is worth a card: a configured phase, reached just now.
    pub fn wants(&self, job: &JobEvent) -> bool {
        self.phases.contains(&job.phase) && job::is_transition(job)
    }

    /// Like [`Settings::target_for`], with a name for the bot that stays while the config
    /// does: `route.<n>` or `webhook`.
    pub fn named_target_for(&self, job: &JobEvent) -> Option<(String, &Target)> {
        match self.routes.iter().find(|route| route.matches(job)) {
            Some(route) => Some((format!("route.{}", route.number), &route.target)),
            None => self.default.as_ref().map(|t| ("webhook".to_string(), t)),
        }
    }

    /// Where fleet events go: the default bot (`webhook`). Routes choose by a job's namespace
    /// and labels, which a fleet event has not; `None` without a default bot.
    pub fn fleet_target(&self) -> Option<&Target> {
        self.default.as_ref()
    }

    /// The first matching route's bot, else the default one; `None` means nobody wants it.
    pub fn target_for(&self, job: &JobEvent) -> Option<&Target> {
        self.routes
            .iter()
            .find(|route| route.matches(job))
            .map(|route| &route.target)
            .or(self.default.as_ref())
    }
}

fn parse_webhook(key: &str, value: &str) -> Result<Webhook, String> {
    if value.trim().is_empty() {
        return Err(format!("config `{key}` is empty"));
    }
    Webhook::parse(value).map_err(|e| format!("config `{key}`: {e}"))
}

/// An empty secret is refused rather than read as "unsigned": it is almost always an unset
/// environment variable or an empty secret file, and the bot would refuse every message.
fn parse_secret(key: &str, value: &str) -> Result<String, String> {
    if value.is_empty() {
        return Err(format!(
            "config `{key}` is empty (remove the key to send unsigned messages)"
        ));
    }
    Ok(value.to_string())
}

/// A comma-separated list of names; empty entries are dropped, an empty list refused.
fn parse_list(key: &str, value: &str) -> Result<Vec<String>, String> {
    let items: Vec<String> = value
        .split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(str::to_string)
        .collect();
    if items.is_empty() {
        return Err(format!("config `{key}` names nobody"));
    }
    Ok(items)
}

fn parse_phases(key: &str, value: &str) -> Result<Vec<Phase>, String> {
    let mut phases = Vec::new();
    for name in value.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let phase = phase_from_name(name).ok_or_else(|| {
            let known: Vec<&str> = PHASES.into_iter().map(phase_name).collect();
            format!(
                "config `{key}`: unknown phase `{name}` (known: {})",
                known.join(", ")
            )
        })?;
        if !phases.contains(&phase) {
            phases.push(phase);
        }
    }
    if phases.is_empty() {
        return Err(format!("config `{key}` names no phase"));
    }
    Ok(phases)
}

fn parse_link(key: &str, label: &str, value: &str) -> Result<Link, String> {
    if label.trim().is_empty() {
        return Err(format!("config `{key}` needs a label after `link.`"));
    }
    if value.trim().is_empty() {
        return Err(format!("config `{key}` is empty"));
    }
    let url = Template::parse(value.trim()).map_err(|e| format!("config `{key}`: {e}"))?;
    Ok(Link {
        label: label.to_string(),
        url,
    })
}

/// Files one `route.<n>.<field>` key into its route's draft.
fn add_route_key(
    drafts: &mut BTreeMap<u32, RouteDraft>,
    key: &str,
    rest: &str,
    value: &str,
    keys: &Keys,
) -> Result<(), String> {
    let (number, field) = rest.split_once('.').ok_or_else(|| {
        format!("unknown config key `{key}` (routes are written `route.<n>.<field>`)")
    })?;
    let number: u32 = number
        .parse()
        .ok()
        .filter(|_| number.bytes().all(|b| b.is_ascii_digit()))
        .ok_or_else(|| format!("config `{key}`: `{number}` is not a route number"))?;
    let draft = drafts.entry(number).or_default();
    let duplicate = || format!("config `{key}`: route {number} sets `{field}` twice");
    match field {
        "namespace" => {
            if draft.namespace.is_some() {
                return Err(duplicate());
            }
            draft.namespace = Some(NamespaceMatch::parse(key, value)?);
        }
        "label" => {
            if draft.label.is_some() {
                return Err(duplicate());
            }
            let (label_key, label_value) = value
                .split_once('=')
                .filter(|(k, _)| !k.trim().is_empty())
                .ok_or_else(|| format!("config `{key}` must be `key=value`"))?;
            draft.label = Some((label_key.trim().to_string(), label_value.trim().to_string()));
        }
        "webhook" => {
            if draft.webhook.is_some() {
                return Err(duplicate());
            }
            draft.webhook = Some(parse_webhook(key, value)?);
        }
        "secret" if keys.signed => {
            if draft.secret.is_some() {
                return Err(duplicate());
            }
            draft.secret = Some(parse_secret(key, value)?);
        }
        _ => {
            let fields = if keys.signed {
                "namespace, label, webhook, secret"
            } else {
                "namespace, label, webhook"
            };
            return Err(format!("unknown config key `{key}` (a route has {fields})"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::sample;

    const HOOK: &str = "https://open.feishu.cn/open-apis/bot/v2/hook/default-token-0001";

    fn config(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        let mut pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        // The host hands the map sorted by key.
        pairs.sort();
        pairs
    }

    /// A provider with every optional key.
    const ALL: Keys = Keys {
        signed: true,
        mentions: true,
        own: &["style"],
    };

    fn settings(pairs: &[(&str, &str)]) -> Settings {
        Settings::from_config(&config(pairs), &ALL).expect("valid config")
    }

    fn error(pairs: &[(&str, &str)]) -> String {
        Settings::from_config(&config(pairs), &ALL).expect_err("invalid config")
    }

    #[test]
    fn defaults() {
        let settings = settings(&[("webhook", HOOK)]);
        assert_eq!(settings.phases, DEFAULT_PHASES.to_vec());
        assert_eq!(
            settings.title.render(&sample()),
            "PyTorchJob ml/llama-finetune: failed"
        );
        assert!(settings.links.is_empty());
        assert!(settings.routes.is_empty());
        let default = settings.default.expect("a default bot");
        assert_eq!(default.secret, None);
    }

    #[test]
    fn phases_are_exact_wit_names() {
        let settings = settings(&[("webhook", HOOK), ("phases", " failed, deleted ,failed,")]);
        assert_eq!(settings.phases, vec![Phase::Failed, Phase::Deleted]);

        let message = error(&[("webhook", HOOK), ("phases", "failed,Finished")]);
        assert!(message.contains("`Finished`"), "{message}");
        let message = error(&[("webhook", HOOK), ("phases", "Failed")]);
        assert!(message.contains("`Failed`"), "{message}");
        let message = error(&[("webhook", HOOK), ("phases", " , ")]);
        assert!(message.contains("no phase"), "{message}");
    }

    #[test]
    fn unknown_keys_are_named() {
        let message = error(&[("webhook", HOOK), ("colour", "red")]);
        assert!(message.contains("`colour`"), "{message}");
        let message = error(&[("webhook", HOOK), ("route.1.channel", "x")]);
        assert!(message.contains("`route.1.channel`"), "{message}");
        let message = error(&[("webhook", HOOK), ("route.one.webhook", HOOK)]);
        assert!(message.contains("`route.one.webhook`"), "{message}");
        let message = error(&[("webhook", HOOK), ("route.1", HOOK)]);
        assert!(message.contains("`route.1`"), "{message}");
    }

    #[test]
    fn errors_never_echo_credentials() {
        for pairs in [
            vec![("webhook", "ftp://open.feishu.cn/hook/default-token-0001")],
            vec![("webhook", "not a url default-token-0001")],
            vec![("route.1.webhook", "open.feishu.cn/hook/default-token-0001")],
            vec![("secret", "default-token-0001")],
        ] {
            let message = error(&pairs);
            assert!(!message.contains("default-token-0001"), "{message}");
        }
        let message = error(&[("webhook", HOOK), ("secret", "")]);
        assert!(message.contains("`secret` is empty"), "{message}");
    }

    #[test]
    fn needs_somewhere_to_send() {
        let message = error(&[("phases", "failed")]);
        assert!(message.contains("`webhook`"), "{message}");
        let message = error(&[("route.1.namespace", "ml")]);
        assert!(message.contains("route.1.webhook"), "{message}");
        // Routes alone are enough.
        let settings = settings(&[("route.1.webhook", HOOK)]);
        assert!(settings.default.is_none());
    }

    #[test]
    fn titles_and_links_are_checked() {
        let message = error(&[("webhook", HOOK), ("title", "{job} done")]);
        assert!(
            message.contains("`title`") && message.contains("`{job}`"),
            "{message}"
        );
        let message = error(&[("webhook", HOOK), ("link.", "https://x")]);
        assert!(message.contains("`link.`"), "{message}");
        let settings = settings(&[
            ("webhook", HOOK),
            ("link.Logs", "https://logs.example/{namespace}/{name}"),
            (
                "link.Dashboard",
                "https://grafana.example/d/jobs?var-job={name}",
            ),
        ]);
        let labels: Vec<&str> = settings.links.iter().map(|l| l.label.as_str()).collect();
        assert_eq!(labels, ["Dashboard", "Logs"]);
    }

    fn routed() -> Settings {
        settings(&[
            ("webhook", HOOK),
            ("route.10.namespace", "ml"),
            (
                "route.10.webhook",
                "https://open.feishu.cn/open-apis/bot/v2/hook/ml-any",
            ),
            ("route.2.namespace", "ml-*"),
            ("route.2.label", "team=nlp"),
            (
                "route.2.webhook",
                "https://open.feishu.cn/open-apis/bot/v2/hook/nlp",
            ),
            ("route.2.secret", "route-two-secret"),
            ("route.3.label", "team = nlp"),
            (
                "route.3.webhook",
                "https://open.feishu.cn/open-apis/bot/v2/hook/any-nlp",
            ),
        ])
    }

    fn token_for(settings: &Settings, namespace: &str, team: Option<&str>) -> Option<String> {
        let mut job = sample();
        job.namespace = namespace.to_string();
        job.labels = team
            .map(|t| vec![("team".to_string(), t.to_string())])
            .unwrap_or_default();
        settings.target_for(&job).map(|t| {
            t.webhook
                .path_with_query
                .rsplit('/')
                .next()
                .unwrap_or("")
                .to_string()
        })
    }

    #[test]
    fn routes_are_tried_in_numeric_order() {
        let settings = routed();
        let numbers: Vec<u32> = settings.routes.iter().map(|r| r.number).collect();
        assert_eq!(numbers, [2, 3, 10], "numeric, not lexical, order");
        assert_eq!(
            settings.routes[0].target.secret.as_deref(),
            Some("route-two-secret")
        );

        assert_eq!(
            token_for(&settings, "ml-prod", Some("nlp")).as_deref(),
            Some("nlp")
        );
        // Route 2 needs both conditions; route 3 only the label.
        assert_eq!(
            token_for(&settings, "ml", Some("nlp")).as_deref(),
            Some("any-nlp")
        );
        assert_eq!(
            token_for(&settings, "ml-prod", Some("cv")).as_deref(),
            Some("default-token-0001")
        );
        assert_eq!(token_for(&settings, "ml", None).as_deref(), Some("ml-any"));
        assert_eq!(
            token_for(&settings, "web", None).as_deref(),
            Some("default-token-0001")
        );
    }

    #[test]
    fn no_default_and_no_match_means_no_target() {
        let settings = settings(&[("route.1.namespace", "ml"), ("route.1.webhook", HOOK)]);
        assert!(token_for(&settings, "ml", None).is_some());
        assert_eq!(token_for(&settings, "web", None), None);

        let catch_all = settings_with_star();
        assert!(token_for(&catch_all, "anything", None).is_some());
    }

    fn settings_with_star() -> Settings {
        settings(&[("route.1.namespace", "*"), ("route.1.webhook", HOOK)])
    }

    #[test]
    fn route_mistakes() {
        let message = error(&[("webhook", HOOK), ("route.1.label", "team")]);
        assert!(message.contains("key=value"), "{message}");
        let message = error(&[
            ("webhook", HOOK),
            ("route.1.webhook", HOOK),
            ("route.01.webhook", HOOK),
        ]);
        assert!(message.contains("twice"), "{message}");
        let message = error(&[("route.1.webhook", HOOK), ("route.1.namespace", " ")]);
        assert!(message.contains("empty"), "{message}");
        let message = error(&[("secret", "route-secret-123")]);
        assert!(message.contains("`webhook` is not"), "{message}");
    }

    #[test]
    fn only_configured_transitions_are_wanted() {
        let settings = settings(&[("webhook", HOOK), ("phases", "failed,succeeded")]);
        let mut job = sample();
        assert!(settings.wants(&job));
        job.previous_phase = Some(Phase::Failed);
        assert!(!settings.wants(&job), "same phase again is no transition");
        job.previous_phase = None;
        assert!(settings.wants(&job));
        job.phase = Phase::Running;
        assert!(!settings.wants(&job), "running is not configured");
    }

    #[test]
    fn debug_output_hides_credentials() {
        let settings = settings(&[("webhook", HOOK), ("secret", "very-secret-value")]);
        let shown = format!("{settings:?}");
        assert!(!shown.contains("default-token-0001"), "{shown}");
        assert!(!shown.contains("very-secret-value"), "{shown}");
    }

    #[test]
    fn mentions_and_own_keys() {
        let settings = settings(&[
            ("webhook", HOOK),
            ("mention", " alice, all ,"),
            ("mention_mobiles", "13800000000"),
            ("style", "action_card"),
        ]);
        assert_eq!(settings.mentions.users, vec!["alice", "all"]);
        assert!(settings.mentions.everyone());
        assert_eq!(settings.mentions.phases, DEFAULT_MENTION_PHASES.to_vec());
        assert!(settings.mentions.apply_to(&sample()));
        let mut running = sample();
        running.phase = Phase::Running;
        assert!(!settings.mentions.apply_to(&running));
        assert_eq!(settings.own("style"), Some("action_card"));
        assert_eq!(
            settings.own_choice("style", &[("markdown", 1), ("action_card", 2)]),
            Ok(2)
        );
        let refused = settings
            .own_choice("style", &[("markdown", 1)])
            .expect_err("not a choice");
        assert_eq!(
            refused,
            "config `style`: `action_card` is not one of markdown"
        );
        assert_eq!(settings.own("other"), None);

        let message = error(&[("webhook", HOOK), ("mention", " , ")]);
        assert!(message.contains("`mention` names nobody"), "{message}");
        let message = error(&[("webhook", HOOK), ("mention_phases", "failed,done")]);
        assert!(
            message.contains("`mention_phases`") && message.contains("`done`"),
            "{message}"
        );
    }

    #[test]
    fn keys_a_provider_lacks_are_unknown() {
        const PLAIN: Keys = Keys {
            signed: false,
            mentions: false,
            own: &[],
        };
        for key in ["secret", "mention", "style", "route.1.secret"] {
            let message = Settings::from_config(&config(&[("webhook", HOOK), (key, "x")]), &PLAIN)
                .expect_err(key);
            assert!(message.contains(&format!("`{key}`")), "{message}");
            assert!(!message.contains("mention_phases"), "{message}");
        }
    }

    #[test]
    fn noise_keys() {
        let settings = settings(&[
            ("webhook", HOOK),
            ("digest_window", "10m"),
            ("quiet_hours", "22:00-08:00"),
            ("quiet_utc_offset", "+08:00"),
        ]);
        assert_eq!(settings.noise.digest_seconds, Some(600));
        assert!(settings.noise.quiet.is_some());
        assert_eq!(settings.noise, {
            let mut plain = settings.noise;
            plain.quiet = Quiet::parse("22:00-08:00", Some("+08:00")).ok();
            plain
        });
        let message = error(&[("webhook", HOOK), ("quiet_utc_offset", "+08:00")]);
        assert!(message.contains("`quiet_hours` is not"), "{message}");
        let message = error(&[("webhook", HOOK), ("digest_window", "soon")]);
        assert!(message.contains("`digest_window`"), "{message}");
        let message = error(&[("webhook", HOOK), ("quiet_hours", "night")]);
        assert!(message.contains("`quiet_hours`"), "{message}");
    }
}
