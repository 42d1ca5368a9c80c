//! What a notifier says about a fleet event: a cluster going offline or coming back online, a
//! fleet rule firing or resolving.
//!
//! A fleet event is about a cluster, not a job: it has no namespace, labels or phase, so the
//! job-shaped settings (`phases`, `title`, `link.*`, routes) do not apply to it. It goes to the
//! default bot (`webhook`) with a title of its own, once per event id.

pub use jobrelay_guest::{FleetEvent, FleetEventKind, fleet_is_trouble, fleet_kind_name};

/// The word a message shows and is coloured by: `offline`, `online`, `firing`, `resolved`.
pub fn state(kind: FleetEventKind) -> &'static str {
    match kind {
        FleetEventKind::ClusterOffline => "offline",
        FleetEventKind::ClusterOnline => "online",
        FleetEventKind::RuleFiring => "firing",
        FleetEventKind::RuleResolved => "resolved",
    }
}

/// Whether the event is about a fleet rule (it then carries the rule, value and threshold).
pub fn is_rule(kind: FleetEventKind) -> bool {
    matches!(
        kind,
        FleetEventKind::RuleFiring | FleetEventKind::RuleResolved
    )
}

/// `Cluster east is offline`, `Rule failure-ratio is firing on east`, ...
pub fn title(event: &FleetEvent) -> String {
    let rule = event.rule.as_deref().unwrap_or("(unnamed)");
    match event.kind {
        FleetEventKind::ClusterOffline => format!("Cluster {} is offline", event.cluster),
        FleetEventKind::ClusterOnline => format!("Cluster {} is back online", event.cluster),
        FleetEventKind::RuleFiring => format!("Rule {rule} is firing on {}", event.cluster),
        FleetEventKind::RuleResolved => format!("Rule {rule} resolved on {}", event.cluster),
    }
}

/// The short facts, in the order shown: the cluster; for rule events the rule, its value and
/// threshold; since when; when the host made the event.
pub fn facts(event: &FleetEvent) -> Vec<(&'static str, String)> {
    let mut facts = vec![("Cluster", event.cluster.clone())];
    if is_rule(event.kind) {
        if let Some(rule) = &event.rule {
            facts.push(("Rule", rule.clone()));
        }
        if let Some(value) = event.value {
            facts.push(("Value", number(value)));
        }
        if let Some(threshold) = event.threshold {
            facts.push(("Threshold", number(threshold)));
        }
    }
    facts.push(("Since", event.since.clone()));
    facts.push(("At", event.time.clone()));
    facts
}

/// A measured value as people read it: `0.31`, `1800` (no `1800.0`), at most four decimals.
pub fn number(value: f64) -> String {
    let rounded = (value * 10_000.0).round() / 10_000.0;
    if rounded.is_finite() {
        format!("{rounded}")
    } else {
        format!("{value}")
    }
}

/// A cluster offline since a failed health check, the usual subject of the tests.
pub fn sample_offline() -> FleetEvent {
    FleetEvent {
        id: "east/8f0c2d1e-5a7b-8c9d-8e0f-1a2b3c4d5e6f/1764324030000".to_string(),
        kind: FleetEventKind::ClusterOffline,
        cluster: "east".to_string(),
        rule: None,
        value: None,
        threshold: None,
        since: "2026-11-28T10:00:00Z".to_string(),
        time: "2026-11-28T10:00:30Z".to_string(),
        summary: "GET /version: connection refused".to_string(),
    }
}

/// A fleet rule firing on `east`.
pub fn sample_firing() -> FleetEvent {
    FleetEvent {
        id: "east/9a1b2c3d-4e5f-8a6b-9c7d-8e9f0a1b2c3d/1764324090000".to_string(),
        kind: FleetEventKind::RuleFiring,
        cluster: "east".to_string(),
        rule: Some("failure-ratio".to_string()),
        value: Some(0.31),
        threshold: Some(0.15),
        since: "2026-11-28T10:00:00Z".to_string(),
        time: "2026-11-28T10:02:00Z".to_string(),
        summary: "job failure ratio 0.31 > 0.15 for 2m on east, kinds: batch-job".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn titles_and_facts() {
        let offline = sample_offline();
        assert_eq!(title(&offline), "Cluster east is offline");
        assert_eq!(
            facts(&offline),
            vec![
                ("Cluster", "east".to_string()),
                ("Since", "2026-11-28T10:00:00Z".to_string()),
                ("At", "2026-11-28T10:00:30Z".to_string()),
            ]
        );
        let firing = sample_firing();
        assert_eq!(title(&firing), "Rule failure-ratio is firing on east");
        let shown: Vec<&str> = facts(&firing).iter().map(|(label, _)| *label).collect();
        assert_eq!(
            shown,
            ["Cluster", "Rule", "Value", "Threshold", "Since", "At"]
        );
        assert!(facts(&firing).contains(&("Value", "0.31".to_string())));
        let mut resolved = firing;
        resolved.kind = FleetEventKind::RuleResolved;
        assert_eq!(title(&resolved), "Rule failure-ratio resolved on east");
        assert_eq!(state(resolved.kind), "resolved");
    }

    #[test]
    fn numbers_read_like_people_write_them() {
        assert_eq!(number(1800.0), "1800");
        assert_eq!(number(0.31), "0.31");
        assert_eq!(number(1.0 / 3.0), "0.3333");
    }
}
