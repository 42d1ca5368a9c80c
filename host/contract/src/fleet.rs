//! Fleet events: news about a cluster or a fleet rule rather than about one job — a cluster
//! going offline or coming back online, a rule of the main file starting or ceasing to hold.
//!
//! A fleet event travels to plugins as a [`JobEvent`] of its own *subject* (a cluster's
//! health, or one rule on one cluster), so that it gets what every job event gets from the
//! lanes without a second delivery path: its place in the durable inbox, one call at a time per
//! subject and in order, retries, dead letters, replay, and a cursor that remembers the last
//! state delivered. The subject is the "job": its uid is made from its name (the same subject
//! always gets the same uid), each event is a new version of it, and its phase is the state
//! (`failed` for offline or firing, `running` for online or resolved). A lane delivers a
//! subject's event only when that phase differs from the last one accepted, so an outage that
//! outlives a restart of the host, announced again by the restarted host, reaches a plugin
//! once. Plugins never see this wrapping: the host calls their `handle-fleet` with the
//! [`FleetEvent`] kept in the carrier's object JSON.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::event::{JobEvent, Phase};

/// The `apiVersion` of a carrier event: no Kubernetes group uses it.
pub const API_VERSION: &str = "fleet.jobrelay.io/v1";
/// The configured-kind name lanes file fleet events under (their counts, `Lane::wants`).
pub const KIND_NAME: &str = "fleet";
/// The carrier's `kind` for a cluster's health.
pub const KIND_CLUSTER: &str = "ClusterHealth";
/// The carrier's `kind` for a rule on a cluster.
pub const KIND_RULE: &str = "FleetRule";

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FleetEventKind {
    /// The cluster failed `offline_after` health checks in a row: jobrelay cannot watch it.
    ClusterOffline,
    /// An offline cluster passed `online_after` health checks in a row.
    ClusterOnline,
    /// A rule's condition has held on the cluster for the rule's `for`.
    RuleFiring,
    /// A firing rule's condition no longer holds.
    RuleResolved,
}

impl FleetEventKind {
    /// The kind as WIT and JSON spell it (`cluster-offline`).
    pub fn as_str(self) -> &'static str {
        match self {
            FleetEventKind::ClusterOffline => "cluster-offline",
            FleetEventKind::ClusterOnline => "cluster-online",
            FleetEventKind::RuleFiring => "rule-firing",
            FleetEventKind::RuleResolved => "rule-resolved",
        }
    }

    /// The carrier's phase: `failed` for the bad state, `running` for the good one.
    pub fn phase(self) -> Phase {
        match self {
            FleetEventKind::ClusterOffline | FleetEventKind::RuleFiring => Phase::Failed,
            FleetEventKind::ClusterOnline | FleetEventKind::RuleResolved => Phase::Running,
        }
    }

    fn raw_phase(self) -> &'static str {
        match self {
            FleetEventKind::ClusterOffline => "Offline",
            FleetEventKind::ClusterOnline => "Online",
            FleetEventKind::RuleFiring => "Firing",
            FleetEventKind::RuleResolved => "Resolved",
        }
    }

    fn is_rule(self) -> bool {
        matches!(
            self,
            FleetEventKind::RuleFiring | FleetEventKind::RuleResolved
        )
    }
}

/// One fleet event, as plugins get it (WIT `fleet.fleet-event`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FleetEvent {
    /// The carrier's id (`cluster/uid/resource_version`): stable across retries and restarts.
    #[serde(default)]
    pub id: String,
    /// What happened.
    pub kind: FleetEventKind,
    /// The cluster the event is about.
    pub cluster: String,
    /// The rule's name, for rule events (a timer's name for a timer's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// For a timer's event (`fleet.timers`), the job it is about: its uid. A timer on one job is
    /// a subject of its own, so its firing and resolution are told once each per job. Not in
    /// the WIT record: plugins read the job from the summary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_uid: Option<String>,
    /// For a rule judged per cluster queue or per cause (`admission_wait_p95`,
    /// `preemptions_per_hour`, `failures_per_hour`), which one: each is a subject of its own.
    /// Not in the WIT record: plugins read it from the summary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// The rule's measured value when it was judged (a ratio, or seconds), for rule events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<f64>,
    /// The rule's threshold, for rule events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold: Option<f64>,
    /// RFC 3339: when the new state began.
    pub since: String,
    /// RFC 3339: when the event was made.
    pub time: String,
    /// One line for people: an offline cluster's last error, or the rule's condition with its
    /// value.
    pub summary: String,
}

/// Why a carrier event holds no readable fleet event.
#[derive(Debug, thiserror::Error)]
#[error("fleet event {id}: its object is not a fleet event: {source}")]
pub struct NotAFleetEvent {
    id: String,
    source: serde_json::Error,
}

/// Whether `event` carries a fleet event.
pub fn is_fleet(event: &JobEvent) -> bool {
    event.api_version == API_VERSION
}

/// Whether `event` carries a rule's fleet event (else, if a carrier, a cluster's).
pub fn is_rule(event: &JobEvent) -> bool {
    is_fleet(event) && event.kind == KIND_RULE
}

impl FleetEvent {
    /// The uid of the subject the event is about: the same for every event of one cluster's
    /// health, or of one rule on one cluster, and different between subjects.
    pub fn subject_uid(&self) -> String {
        subject_uid(
            &self.cluster,
            self.rule.as_deref().filter(|_| self.kind.is_rule()),
            self.job_uid.as_deref().filter(|_| self.kind.is_rule()),
            self.group.as_deref().filter(|_| self.kind.is_rule()),
        )
    }

    /// The carrier of this event as its subject's version `resource_version` (a number that
    /// grows with every event of the subject: see the module's doc). Its id is this event's.
    pub fn into_job_event(mut self, resource_version: u64) -> JobEvent {
        let uid = self.subject_uid();
        let resource_version = resource_version.to_string();
        self.id = JobEvent::make_id(&self.cluster, &uid, &resource_version);
        let (kind, name) = match (&self.rule, self.kind.is_rule()) {
            (Some(rule), true) => (KIND_RULE, rule.clone()),
            _ => (KIND_CLUSTER, self.cluster.clone()),
        };
        let object_json: Arc<str> = serde_json::to_string(&self)
            .unwrap_or_else(|_| "{}".to_string())
            .into();
        JobEvent {
            id: self.id,
            transition_key: String::new(),
            cluster: self.cluster,
            api_version: API_VERSION.to_string(),
            kind: kind.to_string(),
            namespace: String::new(),
            name,
            uid,
            resource_version,
            generation: None,
            phase: self.kind.phase(),
            raw_phase: self.kind.raw_phase().to_string(),
            reason: Some(self.kind.as_str().to_string()),
            message: Some(self.summary),
            previous_phase: None,
            transition_time: self.since,
            labels: Default::default(),
            annotations: Default::default(),
            object_json,
            synthetic: false,
            story: None,
        }
    }

    /// The fleet event a carrier holds, with the carrier's id.
    pub fn of(event: &JobEvent) -> Result<FleetEvent, NotAFleetEvent> {
        let mut fleet: FleetEvent =
            serde_json::from_str(&event.object_json).map_err(|source| NotAFleetEvent {
                id: event.id.clone(),
                source,
            })?;
        fleet.id = event.id.clone();
        Ok(fleet)
    }
}

/// A UUID-shaped uid made from the subject's name: two 64-bit FNV-1a hashes of it (different
/// offsets), with the version nibble set to 8 (a custom UUID) so it reads as one.
fn subject_uid(
    cluster: &str,
    rule: Option<&str>,
    job: Option<&str>,
    group: Option<&str>,
) -> String {
    let subject = match (rule, job, group) {
        (Some(rule), Some(job), _) => format!("timer\u{0}{rule}\u{0}{cluster}\u{0}{job}"),
        (Some(rule), None, Some(group)) => {
            format!("group\u{0}{rule}\u{0}{cluster}\u{0}{group}")
        }
        (Some(rule), None, None) => format!("rule\u{0}{rule}\u{0}{cluster}"),
        (None, _, _) => format!("cluster\u{0}{cluster}"),
    };
    let fnv = |offset: u64| {
        subject.bytes().fold(offset, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        })
    };
    let (a, b) = (fnv(0xcbf2_9ce4_8422_2325), fnv(0x6c62_272e_07bb_0142));
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&a.to_be_bytes());
    bytes[8..].copy_from_slice(&b.to_be_bytes());
    bytes[6] = (bytes[6] & 0x0f) | 0x80;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offline(cluster: &str) -> FleetEvent {
        FleetEvent {
            id: String::new(),
            kind: FleetEventKind::ClusterOffline,
            cluster: cluster.into(),
            rule: None,
            job_uid: None,
            group: None,
            value: None,
            threshold: None,
            since: "2026-11-28T10:00:00Z".into(),
            time: "2026-11-28T10:00:30Z".into(),
            summary: "connection refused".into(),
        }
    }

    /// One subject keeps its uid; clusters, rules and a rule on two clusters each get their own
    /// (a uid made from a name that repeats is the point here: it must repeat exactly for the
    /// same subject and never for another).
    #[test]
    fn subjects_keep_their_uid_and_never_share_one() {
        let a = offline("east");
        let mut a_again = offline("east");
        a_again.kind = FleetEventKind::ClusterOnline;
        assert_eq!(a.subject_uid(), a_again.subject_uid());
        let mut rule = offline("east");
        rule.kind = FleetEventKind::RuleFiring;
        rule.rule = Some("east".into());
        let mut rule_west = rule.clone();
        rule_west.cluster = "west".into();
        let uids = [
            a.subject_uid(),
            offline("west").subject_uid(),
            rule.subject_uid(),
            rule_west.subject_uid(),
            // Names that join to the same text without the separator.
            subject_uid("ea", Some("st"), None, None),
            subject_uid("st", Some("ea"), None, None),
            // A timer on two jobs, and on a job whose uid is another's cluster.
            subject_uid("east", Some("east"), Some("u1"), None),
            subject_uid("east", Some("east"), Some("u2"), None),
            subject_uid("u1", Some("east"), Some("east"), None),
            // A rule on two cluster queues, and on a queue named as a job's uid.
            subject_uid("east", Some("east"), None, Some("a100")),
            subject_uid("east", Some("east"), None, Some("cpu")),
            subject_uid("east", Some("east"), None, Some("u1")),
        ];
        let distinct: std::collections::HashSet<_> = uids.iter().collect();
        assert_eq!(distinct.len(), uids.len(), "{uids:?}");
        assert!(
            uids.iter()
                .all(|u| u.len() == 36 && u.as_bytes()[14] == b'8')
        );
    }

    #[test]
    fn a_carrier_round_trips_and_names_its_state() {
        let event = offline("east").into_job_event(1_700_000_000_123);
        assert!(is_fleet(&event));
        assert_eq!(event.phase, Phase::Failed);
        assert_eq!(event.raw_phase, "Offline");
        assert_eq!(event.kind, KIND_CLUSTER);
        assert!(!is_rule(&event));
        assert_eq!(
            event.id,
            JobEvent::make_id("east", &event.uid, "1700000000123")
        );
        let back = FleetEvent::of(&event).expect("a fleet event");
        assert_eq!(back.id, event.id);
        assert_eq!(back.kind, FleetEventKind::ClusterOffline);
        assert_eq!(back.summary, "connection refused");
        let mut bad = event.clone();
        bad.object_json = "{\"kind\": 3}".into();
        let error = FleetEvent::of(&bad)
            .expect_err("not a fleet event")
            .to_string();
        assert!(error.contains(&event.id), "{error}");
    }
}
