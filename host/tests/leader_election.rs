//! The Lease lock and the election against the simulator's real `coordination.k8s.io/v1`
//! Leases over HTTP: one holder at a time, take-over only after the holder went quiet for the
//! Lease duration, release for an immediate hand-over, and the leader stepping down when it
//! cannot renew.

use std::time::{Duration, Instant};

use jobrelay::clusters::supervisor::build_client;
use jobrelay_coordination::lease::{Holding, LeaseLock};
use jobrelay_coordination::settings::Timings;
use jobrelay_coordination::{Election, Role};
use jobrelay_testkit::Gvr;
use jobrelay_testkit::SimCluster;
use kube::config::Kubeconfig;
use tokio_util::sync::CancellationToken;

async fn client(sim: &SimCluster) -> kube::Client {
    let kubeconfig = Kubeconfig::from_yaml(&sim.kubeconfig_yaml()).expect("kubeconfig");
    build_client(&kubeconfig, None).await.expect("client")
}

async fn lock(sim: &SimCluster, identity: &str, duration: Duration) -> LeaseLock {
    LeaseLock::new(client(sim).await, "jobrelay", "relay", identity, duration)
}

fn holder(sim: &SimCluster) -> Option<String> {
    let lease = sim.get(&Gvr::LEASE, "jobrelay", "relay").ok()?;
    lease["spec"]["holderIdentity"].as_str().map(str::to_string)
}

#[tokio::test]
async fn one_holder_at_a_time_and_take_over_only_after_expiry() {
    let sim = SimCluster::start("home").await.expect("simulator");
    let duration = Duration::from_secs(2);
    let mut a = lock(&sim, "a", duration).await;
    let mut b = lock(&sim, "b", duration).await;

    assert_eq!(
        a.try_hold().await.expect("a"),
        Holding::Held,
        "a creates the Lease"
    );
    assert_eq!(
        b.try_hold().await.expect("b"),
        Holding::Other(Some("a".into()))
    );
    assert_eq!(a.try_hold().await.expect("a renews"), Holding::Held);
    assert_eq!(holder(&sim).as_deref(), Some("a"));

    // a goes quiet: b may take over only once the Lease has gone unchanged for its duration,
    // counted from when b itself saw it change.
    let quiet = Instant::now();
    let taken = loop {
        match b.try_hold().await.expect("b tries") {
            Holding::Held => break quiet.elapsed(),
            Holding::Other(h) => assert_eq!(h.as_deref(), Some("a")),
        }
        assert!(
            quiet.elapsed() < Duration::from_secs(30),
            "b never took the Lease"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        taken >= duration,
        "b took the Lease {taken:?} after a went quiet, before its {duration:?} ran out"
    );
    assert_eq!(holder(&sim).as_deref(), Some("b"));
    let lease = sim.get(&Gvr::LEASE, "jobrelay", "relay").expect("lease");
    assert_eq!(lease["spec"]["leaseTransitions"], 1, "{lease}");

    // a comes back: it sees b's Lease and stays out.
    assert_eq!(
        a.try_hold().await.expect("a"),
        Holding::Other(Some("b".into()))
    );
    // b hands over: a takes it at once, without waiting for expiry.
    b.release().await.expect("release");
    assert_eq!(holder(&sim), None);
    assert_eq!(a.try_hold().await.expect("a"), Holding::Held);
    assert_eq!(holder(&sim).as_deref(), Some("a"));
    // Releasing a Lease held by someone else changes nothing.
    b.release().await.expect("release of a Lease not held");
    assert_eq!(holder(&sim).as_deref(), Some("a"));
}

#[tokio::test]
async fn of_two_replicas_racing_for_a_free_lease_exactly_one_wins() {
    let sim = SimCluster::start("home").await.expect("simulator");
    for round in 0..10 {
        let name = format!("race-{round}");
        let mut locks = Vec::new();
        for id in ["a", "b", "c"] {
            locks.push(LeaseLock::new(
                client(&sim).await,
                "jobrelay",
                &name,
                id,
                Duration::from_secs(30),
            ));
        }
        let [mut a, mut b, mut c] = <[LeaseLock; 3]>::try_from(locks).ok().expect("three");
        let (ra, rb, rc) = tokio::join!(a.try_hold(), b.try_hold(), c.try_hold());
        let held = [ra, rb, rc]
            .into_iter()
            .map(|r| r.expect("no API error"))
            .filter(|h| *h == Holding::Held)
            .count();
        assert_eq!(held, 1, "round {round}: {held} replicas think they hold it");
    }
}

fn timings(lease: u64, deadline: u64, retry: u64) -> Timings {
    Timings {
        lease_duration: Duration::from_secs(lease),
        renew_deadline: Duration::from_secs(deadline),
        retry_period: Duration::from_secs(retry),
    }
}

async fn wait_for(role: &mut tokio::sync::watch::Receiver<Role>, want: &Role) -> Duration {
    let started = Instant::now();
    let reached = tokio::time::timeout(Duration::from_secs(30), role.wait_for(|r| r == want))
        .await
        .map(|r| r.is_ok());
    assert!(
        matches!(reached, Ok(true)),
        "role never became {want:?} (is {:?})",
        *role.borrow()
    );
    started.elapsed()
}

#[tokio::test]
async fn the_election_hands_over_on_shutdown_and_the_leader_steps_down_when_cut_off() {
    let sim = SimCluster::start("home").await.expect("simulator");
    let t = timings(3, 2, 1);
    let stop_a = CancellationToken::new();
    let a = Election::start(lock(&sim, "a", t.lease_duration).await, t, stop_a.clone());
    let mut role_a = a.role();
    wait_for(&mut role_a, &Role::Leader).await;

    let stop_b = CancellationToken::new();
    let b = Election::start(lock(&sim, "b", t.lease_duration).await, t, stop_b.clone());
    let mut role_b = b.role();
    wait_for(
        &mut role_b,
        &Role::Follower {
            holder: Some("a".into()),
        },
    )
    .await;

    // A leader that shuts down releases the Lease: b leads within a retry period or so, not
    // a whole Lease duration.
    stop_a.cancel();
    a.finished().await;
    let handover = wait_for(&mut role_b, &Role::Leader).await;
    println!("hand-over after release: {handover:?}");
    assert_eq!(holder(&sim).as_deref(), Some("b"));

    // Cut b off from the home cluster: it cannot renew, so it steps down (Lost) once its
    // renew deadline has passed, and never comes back by itself.
    sim.outage_hard(true).expect("outage");
    let stepped_down = wait_for(&mut role_b, &Role::Lost).await;
    println!("stepped down after losing the API: {stepped_down:?}");
    assert!(
        stepped_down >= Duration::from_secs(1),
        "stepped down after {stepped_down:?}, before the renew deadline could pass"
    );
    sim.outage_hard(false).expect("end the outage");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(*role_b.borrow(), Role::Lost, "a lost leader stays lost");
    stop_b.cancel();
    b.finished().await;
}
