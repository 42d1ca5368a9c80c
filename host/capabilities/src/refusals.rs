//! Counts of the limits plugins ran into: a key-value write past the quota, an archive write
//! past the prefix's quota, an HTTP request past the open-request limit, a write to the job
//! outside what `grants.job` allows.
//!
//! The refusal itself is an error value the plugin sees (and so a retry, a dead letter, a log
//! line); this count is what an operator alerts on: a plugin that keeps hitting a limit is
//! misbehaving, or its grant is too small. Process-wide, kept in the [`Services`] every call
//! shares, read by the status page and the metrics.
//!
//! [`Services`]: super::services::Services

use std::collections::BTreeMap;

use parking_lot::Mutex;

/// The limits counted, as they appear in the `resource` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Limit {
    /// `grants.kv_quota`.
    KvQuota,
    /// `grants.archive.max_total_bytes`.
    ArchiveQuota,
    /// `grants.http.max_concurrent_requests`.
    HttpOpenRequests,
    /// `grants.job`: a write to the job outside the granted prefixes, over the size or the
    /// call's write limit.
    JobWrites,
}

impl Limit {
    /// Every limit, for metrics that show each at 0 before its first refusal.
    pub const ALL: [Limit; 4] = [
        Limit::KvQuota,
        Limit::ArchiveQuota,
        Limit::HttpOpenRequests,
        Limit::JobWrites,
    ];

    /// The limit as the refusals metric's `limit` label names it.
    pub fn as_str(self) -> &'static str {
        match self {
            Limit::KvQuota => "kv_quota",
            Limit::ArchiveQuota => "archive_quota",
            Limit::HttpOpenRequests => "http_open_requests",
            Limit::JobWrites => "job_writes",
        }
    }
}

/// Refusals per plugin and limit since the process started.
#[derive(Debug, Default)]
pub struct Refusals {
    counts: Mutex<BTreeMap<(String, Limit), u64>>,
}

impl Refusals {
    /// One more refusal of `plugin` by `limit`.
    pub fn count(&self, plugin: &str, limit: Limit) {
        let mut counts = self.counts.lock();
        *counts.entry((plugin.to_string(), limit)).or_default() += 1;
    }

    /// The counts of one plugin, by limit name.
    pub fn of(&self, plugin: &str) -> BTreeMap<&'static str, u64> {
        let counts = self.counts.lock();
        counts
            .iter()
            .filter(|((p, _), _)| p == plugin)
            .map(|((_, limit), n)| (limit.as_str(), *n))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_kept_per_plugin_and_limit() {
        let r = Refusals::default();
        r.count("a", Limit::KvQuota);
        r.count("a", Limit::KvQuota);
        r.count("a", Limit::HttpOpenRequests);
        r.count("b", Limit::ArchiveQuota);
        assert_eq!(
            r.of("a"),
            BTreeMap::from([("http_open_requests", 1), ("kv_quota", 2)])
        );
        assert_eq!(r.of("b"), BTreeMap::from([("archive_quota", 1)]));
        assert!(r.of("c").is_empty());
    }
}
