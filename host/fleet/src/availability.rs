//! Whether a cluster is available, judged with hysteresis: offline only after
//! `offline_after` failed checks in a row, online again only after `online_after` good ones.
//!
//! What one stream sees moment to moment (its list failed, its watch was cut) is too jumpy to
//! page anyone on: a single refused request would mark the cluster down and the next one up.
//! So availability moves on *checks* — one every probe interval, made by the cluster's
//! supervisor: the API server is asked for `/version`, and the check fails if no answer comes
//! in time; a client that cannot even be built fails one check per attempt. Counting checks
//! rather than stream errors keeps the thresholds meaning the same on a cluster with one stream
//! and on one with forty. The streams' own failures do not fail a check: a stream waits out a
//! backoff after every failure (0.8 s, then longer), so a cut of a second would look like
//! several failed checks on a short interval; a cluster whose API answers while its streams
//! fail (access to the kinds revoked, say) is `degraded`, which the streams' own metrics and
//! the status name.
//!
//! Between the two thresholds the cluster keeps its last verdict; while it is reachable but a
//! check failed lately, or some of its streams are failing, it is `degraded`. The crossings —
//! offline, and back online — are [`Change`]s (fleet events), and so is the first verdict
//! (whichever it is): a process that just started does not know what was announced before it,
//! and the lanes, which remember what each plugin was told, turn a first "online" into news
//! only when it ends an outage announced before. Degraded is a state to look at, not news.
//!
//! A cluster from an inventory (`cluster_sources`) has a second opinion: what its object says
//! of the control plane ([`Source`]). A Cluster API cluster whose control plane is not
//! initialised yet is being built — its failing checks are expected, page no one and leave it
//! `connecting`; a ClusterProfile whose manager reports the control plane unhealthy keeps an
//! answering cluster `degraded` and takes a failing one offline at its first failed check,
//! the source confirming what the hysteresis would wait for.
//!
//! A pure state machine: no I/O, no clock; the caller passes the time.

use serde::{Deserialize, Serialize};

/// The thresholds (main file `clusters.health`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Thresholds {
    /// Failed checks in a row that make an available (or starting) cluster offline.
    pub offline_after: u32,
    /// Good checks in a row that bring an offline cluster back online.
    pub online_after: u32,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            offline_after: 3,
            online_after: 2,
        }
    }
}

/// What the cluster's streams are doing, summed up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Streams {
    /// Every stream is in sync (or watches a kind the cluster does not serve).
    Synced,
    /// Some are still listing for the first time; none is failing.
    Starting,
    /// Some are failing, some work.
    SomeFailing,
    /// Every stream that is not a missing kind is failing.
    AllFailing,
}

/// What the inventory object a cluster comes from says of its control plane.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// Nothing against it, or the cluster is not from a source that tells.
    #[default]
    Ready,
    /// Being built: its control plane is not initialised yet (Cluster API). Failed checks
    /// make no outage while it is.
    Provisioning,
    /// Its manager reports the control plane unhealthy (ClusterProfile
    /// `ControlPlaneHealthy` False): never online while it says so, offline at the first
    /// failed check.
    Unhealthy,
}

/// The verdict people and metrics read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Availability {
    /// No verdict yet: neither a good check or a full sync, nor `offline_after` failures.
    Connecting,
    /// Reachable: the last check passed and no stream is failing.
    Online,
    /// Reachable, but a check failed lately or some streams are failing.
    Degraded,
    /// `offline_after` checks failed in a row, and `online_after` good ones have not followed.
    Offline,
}

impl Availability {
    /// Every verdict, so a metric can set each state's series (1 for the current, 0 for the
    /// rest).
    pub const ALL: [Availability; 4] = [
        Availability::Connecting,
        Availability::Online,
        Availability::Degraded,
        Availability::Offline,
    ];

    /// The verdict as the metrics' `state` label and the status spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Availability::Connecting => "connecting",
            Availability::Online => "online",
            Availability::Degraded => "degraded",
            Availability::Offline => "offline",
        }
    }
}

/// A crossing of a threshold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// `offline_after` checks failed in a row.
    Offline {
        /// The first failed check of the run (ms since the epoch).
        since: i64,
    },
    /// `online_after` checks passed in a row after an outage, or the first verdict is that
    /// the cluster is reachable.
    Online {
        /// The first good check of the run, or the full sync (ms since the epoch).
        since: i64,
    },
}

/// One cluster's judge.
#[derive(Debug, Clone)]
pub struct Judge {
    thresholds: Thresholds,
    /// `None` until the first verdict.
    reachable: Option<bool>,
    failed_in_a_row: u32,
    good_in_a_row: u32,
    /// The first check of the current run of failures, or of good checks.
    run_started: i64,
    streams: Streams,
    /// When the cluster was last wholly in sync: a check passed with every stream synced, or
    /// the last stream came into sync.
    last_sync: Option<i64>,
    /// When the verdict last changed.
    since: i64,
    state: Availability,
    source: Source,
}

impl Judge {
    /// A judge with no verdict yet (`connecting`); `now` (ms since the epoch) is when the
    /// cluster was first configured.
    pub fn new(thresholds: Thresholds, now: i64) -> Judge {
        Judge {
            thresholds,
            reachable: None,
            failed_in_a_row: 0,
            good_in_a_row: 0,
            run_started: now,
            streams: Streams::Starting,
            last_sync: None,
            since: now,
            state: Availability::Connecting,
            source: Source::Ready,
        }
    }

    /// New thresholds (the main file changed); the runs counted so far stay, so a cluster
    /// that already failed enough checks under the new threshold goes at its next check.
    pub fn set_thresholds(&mut self, thresholds: Thresholds) {
        self.thresholds = thresholds;
    }

    /// The current verdict.
    pub fn state(&self) -> Availability {
        self.state
    }

    /// When the verdict last changed (ms since the epoch).
    pub fn since(&self) -> i64 {
        self.since
    }

    /// The standing verdict as a crossing, told again: `Offline` or `Online` since the verdict
    /// last changed; none before the first verdict.
    pub fn standing(&self) -> Option<Change> {
        let since = self.since;
        self.reachable.map(|reachable| {
            if reachable {
                Change::Online { since }
            } else {
                Change::Offline { since }
            }
        })
    }

    /// When the cluster was last wholly in sync (ms since the epoch); none before the first
    /// time.
    pub fn last_sync(&self) -> Option<i64> {
        self.last_sync
    }

    /// Checks failed since the last good one, as the status and the metrics show them.
    pub fn failed_in_a_row(&self) -> u32 {
        self.failed_in_a_row
    }

    /// One check: `answered` — the API server answered the probe.
    pub fn check(&mut self, answered: bool, now: i64) -> Option<Change> {
        let good = answered;
        let change = if good {
            if self.good_in_a_row == 0 {
                self.run_started = now;
            }
            self.good_in_a_row = self.good_in_a_row.saturating_add(1);
            self.failed_in_a_row = 0;
            if self.streams == Streams::Synced {
                self.last_sync = Some(now);
            }
            match self.reachable {
                None => {
                    self.reachable = Some(true);
                    Some(Change::Online {
                        since: self.run_started,
                    })
                }
                Some(false) if self.good_in_a_row >= self.thresholds.online_after.max(1) => {
                    self.reachable = Some(true);
                    Some(Change::Online {
                        since: self.run_started,
                    })
                }
                _ => None,
            }
        } else {
            if self.failed_in_a_row == 0 {
                self.run_started = now;
            }
            self.failed_in_a_row = self.failed_in_a_row.saturating_add(1);
            self.good_in_a_row = 0;
            self.go_offline_if_due()
        };
        self.settle(now);
        change
    }

    /// What the cluster's inventory object says now (see [`Source`]). Turning unhealthy
    /// while a check fails, or ready after failed checks a provisioning cluster was spared,
    /// is the offline crossing at once.
    pub fn source(&mut self, source: Source, now: i64) -> Option<Change> {
        self.source = source;
        let change = self.go_offline_if_due();
        self.settle(now);
        change
    }

    /// The offline crossing, when the failed checks in a row call for it: `offline_after`,
    /// or one while the source reports the control plane unhealthy; never while it says
    /// the cluster is still being built.
    fn go_offline_if_due(&mut self) -> Option<Change> {
        let needed = match self.source {
            Source::Ready => self.thresholds.offline_after.max(1),
            Source::Unhealthy => 1,
            Source::Provisioning => return None,
        };
        if self.reachable == Some(false) || self.failed_in_a_row < needed {
            return None;
        }
        self.reachable = Some(false);
        Some(Change::Offline {
            since: self.run_started,
        })
    }

    /// The streams changed. A cluster whose every stream came into sync is reachable, checked
    /// or not — unless it is offline, which only good checks end.
    pub fn streams(&mut self, streams: Streams, now: i64) -> Option<Change> {
        self.streams = streams;
        let mut change = None;
        if streams == Streams::Synced {
            self.last_sync = Some(now);
            if self.reachable.is_none() {
                self.reachable = Some(true);
                change = Some(Change::Online { since: now });
            }
        }
        self.settle(now);
        change
    }

    fn settle(&mut self, now: i64) {
        let state = match self.reachable {
            None => Availability::Connecting,
            Some(false) => Availability::Offline,
            Some(true) if self.failed_in_a_row > 0 || self.source == Source::Unhealthy => {
                Availability::Degraded
            }
            Some(true) => match self.streams {
                Streams::Synced | Streams::Starting => Availability::Online,
                Streams::SomeFailing | Streams::AllFailing => Availability::Degraded,
            },
        };
        if state != self.state {
            self.state = state;
            self.since = now;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn judge(offline_after: u32, online_after: u32) -> Judge {
        Judge::new(
            Thresholds {
                offline_after,
                online_after,
            },
            0,
        )
    }

    #[test]
    fn offline_after_n_failures_online_after_m_good_checks() {
        let mut j = judge(3, 2);
        assert_eq!(
            j.streams(Streams::Synced, 1),
            Some(Change::Online { since: 1 })
        );
        assert_eq!(j.state(), Availability::Online);
        assert_eq!(j.check(false, 10), None);
        assert_eq!(j.state(), Availability::Degraded);
        assert_eq!(j.check(false, 20), None);
        assert_eq!(j.check(false, 30), Some(Change::Offline { since: 10 }));
        assert_eq!(j.state(), Availability::Offline);
        assert_eq!(j.check(false, 40), None, "an outage is news once");
        assert_eq!(j.check(true, 50), None);
        assert_eq!(j.state(), Availability::Offline);
        assert_eq!(j.check(true, 60), Some(Change::Online { since: 50 }));
        assert_eq!(j.state(), Availability::Online);
        assert_eq!(j.check(true, 70), None);
    }

    /// Alternating checks at the edge never cross either threshold above 1.
    #[test]
    fn flapping_at_the_edge_changes_nothing() {
        let mut j = judge(2, 2);
        j.streams(Streams::Synced, 0);
        for t in 0..100 {
            assert_eq!(j.check(t % 2 == 0, t), None, "check {t}");
            assert_ne!(j.state(), Availability::Offline);
        }
        // One failure short of the threshold, then good: still no change.
        let mut j = judge(3, 2);
        j.streams(Streams::Synced, 0);
        for round in 0..20 {
            let t = round * 10;
            assert_eq!(j.check(false, t), None);
            assert_eq!(j.check(false, t + 1), None);
            assert_eq!(j.check(true, t + 2), None);
        }
        // Offline, then one good check short of `online_after` between failures: stays offline.
        let mut j = judge(1, 3);
        assert_eq!(j.check(false, 0), Some(Change::Offline { since: 0 }));
        for round in 0..20 {
            let t = 1 + round * 10;
            assert_eq!(j.check(true, t), None);
            assert_eq!(j.check(true, t + 1), None);
            assert_eq!(j.check(false, t + 2), None);
            assert_eq!(j.state(), Availability::Offline);
        }
    }

    /// The first verdict is always announced, whichever it is, and only once.
    #[test]
    fn the_first_verdict() {
        let mut j = judge(2, 2);
        assert_eq!(j.state(), Availability::Connecting);
        assert_eq!(j.check(false, 1), None);
        assert_eq!(j.state(), Availability::Connecting);
        assert_eq!(j.check(false, 2), Some(Change::Offline { since: 1 }));
        let mut j = judge(2, 2);
        assert_eq!(j.check(true, 1), Some(Change::Online { since: 1 }));
        assert_eq!(j.state(), Availability::Online);
        assert_eq!(j.streams(Streams::Synced, 2), None);
        let mut j = judge(2, 2);
        assert_eq!(j.streams(Streams::Starting, 4), None);
        assert_eq!(
            j.streams(Streams::Synced, 5),
            Some(Change::Online { since: 5 })
        );
        assert_eq!(j.check(true, 6), None);
        assert_eq!(j.state(), Availability::Online);
        assert_eq!(j.last_sync(), Some(6));
    }

    /// The standing verdict, told again at a take-over: none before the first, then the
    /// crossing the cluster stands at, since the verdict last changed.
    #[test]
    fn the_standing_verdict_is_the_last_crossing() {
        let mut j = judge(2, 2);
        assert_eq!(j.standing(), None);
        j.check(false, 1);
        j.check(false, 2);
        assert_eq!(j.standing(), Some(Change::Offline { since: 2 }));
        j.check(true, 3);
        assert_eq!(
            j.standing(),
            Some(Change::Offline { since: 2 }),
            "one good check"
        );
        j.check(true, 4);
        assert_eq!(j.standing(), Some(Change::Online { since: 4 }));
    }

    /// Failing streams make an answering cluster degraded, never offline; offline ends only
    /// by good checks, not by streams syncing.
    #[test]
    fn failing_streams_degrade_and_do_not_end_an_outage() {
        let mut j = judge(2, 1);
        j.streams(Streams::Synced, 0);
        j.streams(Streams::SomeFailing, 1);
        assert_eq!(j.check(true, 2), None);
        assert_eq!(j.state(), Availability::Degraded);
        j.streams(Streams::AllFailing, 3);
        for t in 4..20 {
            assert_eq!(j.check(true, t), None);
            assert_eq!(j.state(), Availability::Degraded);
        }
        assert_eq!(j.check(false, 20), None);
        assert_eq!(j.check(false, 21), Some(Change::Offline { since: 20 }));
        j.streams(Streams::Synced, 22);
        assert_eq!(j.state(), Availability::Offline);
        assert_eq!(j.check(true, 23), Some(Change::Online { since: 23 }));
        assert_eq!(j.state(), Availability::Online);
    }

    /// Starting with both of a cluster's first verdicts possible: the changes after the
    /// first one alternate.
    #[test]
    fn a_first_online_then_crossings() {
        let mut j = judge(1, 1);
        assert_eq!(j.check(true, 0), Some(Change::Online { since: 0 }));
        assert_eq!(j.check(false, 1), Some(Change::Offline { since: 1 }));
        assert_eq!(j.check(true, 2), Some(Change::Online { since: 2 }));
    }

    /// A cluster being built fails its checks without an outage; once its source says it
    /// is built, the failures it had are the outage at once. A cluster that answered before
    /// it was provisioning keeps its verdict.
    #[test]
    fn a_cluster_being_built_is_connecting_not_offline() {
        let mut j = judge(2, 2);
        assert_eq!(j.source(Source::Provisioning, 0), None);
        for t in 1..10 {
            assert_eq!(j.check(false, t), None, "check {t}");
            assert_eq!(j.state(), Availability::Connecting);
        }
        assert_eq!(
            j.source(Source::Ready, 10),
            Some(Change::Offline { since: 1 })
        );
        assert_eq!(j.state(), Availability::Offline);
        // Built and answering: the first verdict is online, as for any cluster.
        let mut j = judge(2, 2);
        j.source(Source::Provisioning, 0);
        assert_eq!(j.check(false, 1), None);
        assert_eq!(j.check(true, 2), Some(Change::Online { since: 2 }));
        assert_eq!(j.source(Source::Ready, 3), None);
        assert_eq!(j.state(), Availability::Online);
    }

    /// A control plane its manager reports unhealthy: an answering cluster is degraded, not
    /// online; one failed check is the outage; healthy again, online once checks pass.
    #[test]
    fn an_unhealthy_control_plane_degrades_and_goes_offline_at_once() {
        let mut j = judge(3, 2);
        j.streams(Streams::Synced, 0);
        assert_eq!(j.source(Source::Unhealthy, 1), None);
        assert_eq!(j.state(), Availability::Degraded);
        assert_eq!(j.check(true, 2), None);
        assert_eq!(j.state(), Availability::Degraded);
        assert_eq!(j.check(false, 3), Some(Change::Offline { since: 3 }));
        assert_eq!(j.state(), Availability::Offline);
        assert_eq!(j.source(Source::Ready, 4), None, "an outage is news once");
        assert_eq!(j.check(true, 5), None);
        assert_eq!(j.check(true, 6), Some(Change::Online { since: 5 }));
        assert_eq!(j.state(), Availability::Online);
        // A check already failing when the report comes: offline then.
        let mut j = judge(3, 2);
        j.streams(Streams::Synced, 0);
        assert_eq!(j.check(false, 1), None);
        assert_eq!(
            j.source(Source::Unhealthy, 2),
            Some(Change::Offline { since: 1 })
        );
    }

    proptest! {
        /// Whatever the sequence of checks after a first verdict of online: changes alternate
        /// (offline, online, offline ...),
        /// an offline change follows exactly `offline_after` failures in a row and an online
        /// change exactly `online_after` good checks in a row.
        #[test]
        fn changes_alternate_and_need_their_runs(
            checks in proptest::collection::vec(any::<bool>(), 0..200),
            n in 1u32..5,
            m in 1u32..5,
        ) {
            let mut j = judge(n, m);
            prop_assert_eq!(j.streams(Streams::Synced, 0), Some(Change::Online { since: 0 }));
            let mut last: Option<bool> = Some(true);
            let (mut fails, mut goods) = (0u32, 0u32);
            for (t, ok) in checks.into_iter().enumerate() {
                if ok { goods += 1; fails = 0; } else { fails += 1; goods = 0; }
                match j.check(ok, t as i64) {
                    Some(Change::Offline { since }) => {
                        prop_assert_ne!(last, Some(false));
                        prop_assert_eq!(fails, n);
                        prop_assert_eq!(since, t as i64 + 1 - i64::from(n));
                        last = Some(false);
                    }
                    Some(Change::Online { since }) => {
                        prop_assert_eq!(last, Some(false));
                        prop_assert_eq!(goods, m);
                        prop_assert_eq!(since, t as i64 + 1 - i64::from(m));
                        last = Some(true);
                    }
                    None => {}
                }
                prop_assert_eq!(j.state() == Availability::Offline, last == Some(false));
            }
        }
    }
}
