//! Clean-up across kills: the daemon is SIGKILLed at random moments (seeded) while finished
//! jobs wait for their deletion — some scheduled, some queued at the cluster's pace, some
//! being deleted. Nothing of the schedule is stored: each new process lists the jobs again.
//! In the end every finished job is deleted (none lost), each by exactly one DELETE (none
//! repeated: a second one would answer 404), and only after event-log delivered its end.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use jobrelay_testkit::{Flavor, Gvr, JobDriver, Pace, SimCluster};

use crate::process::{DEADLINE, Relay, Rng, plugin_dir, read_lines, soak_seed, str_of, write};

const ROUNDS: usize = 4;
const PER_ROUND: usize = 20;

fn config_folder(root: &std::path::Path, sim: &SimCluster) {
    write(
        &root.join("jobrelay.yaml"),
        &format!(
            "plugin_dir: {}\nstate: {{path: state/jobrelay.db}}\ndebounce_ms: 100\n\
             kinds:\n  - {{name: volcano-job}}\n\
             cleanup:\n  per_cluster_per_second: 4\n\
             \x20 rules: [{{kinds: [volcano-job], after_finished: 1s}}]\n",
            plugin_dir().display()
        ),
    );
    write(&root.join("clusters/alpha.yaml"), &sim.kubeconfig_yaml());
    write(
        &root.join("plugins/log.yaml"),
        "wasm: event-log.wasm\ndelivery: transitions\n\
         grants:\n  filesystem:\n    - {host: out/log, guest: /data, writable: true}\n\
         config:\n  file: events.jsonl\n",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kills_between_the_schedule_and_the_delete_neither_lose_nor_repeat_a_deletion() {
    let seed = soak_seed();
    eprintln!("cleanup kill seed {seed} (JOBRELAY_SOAK_SEED={seed} repeats it)");
    let mut rng = Rng(seed);
    let sim = SimCluster::start("alpha").await.expect("simulator");
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().to_path_buf();
    config_folder(&config, &sim);

    let mut names = Vec::new();
    let mut uids = BTreeMap::new();
    for round in 0..ROUNDS {
        let mut relay = Relay::start(&config, &format!("round {round}"));
        for i in 0..PER_ROUND {
            let name = format!("r{round}-{i}");
            let mut job = JobDriver::builder(Flavor::Volcano, "ml", &name)
                .pace(Pace::Wall)
                .create(&sim)
                .expect("create");
            job.running().expect("running");
            job.succeeded().expect("succeeded");
            uids.insert(name.clone(), job.uid().to_string());
            names.push(name);
        }
        let after = Duration::from_millis(rng.range(1500, 6000));
        tokio::time::sleep(after).await;
        relay.sigkill().await;
        eprintln!(
            "round {round}: killed after {after:?}, {} deletions so far",
            sim.deletions().len()
        );
    }

    let relay = Relay::start(&config, "after the kills");
    let started = Instant::now();
    while names
        .iter()
        .any(|n| sim.get(&Gvr::VOLCANO_JOB, "ml", n).is_ok())
    {
        assert!(
            started.elapsed() < DEADLINE,
            "jobs still standing: {:?}\n{}",
            names
                .iter()
                .filter(|n| sim.get(&Gvr::VOLCANO_JOB, "ml", n).is_ok())
                .collect::<Vec<_>>(),
            relay.tail()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let mut by_name: BTreeMap<String, Vec<(Option<String>, u16)>> = BTreeMap::new();
    for d in sim.deletions() {
        by_name
            .entry(d.name.clone())
            .or_default()
            .push((d.precondition_uid.clone(), d.status));
    }
    for name in &names {
        let calls = by_name.get(name).cloned().unwrap_or_default();
        assert_eq!(
            calls,
            vec![(Some(uids[name].clone()), 200)],
            "{name}: exactly one DELETE, with its uid (seed {seed})"
        );
    }
    let (lines, _) = read_lines(&config.join("out/log/events.jsonl"));
    let delivered: BTreeSet<&str> = lines
        .iter()
        .filter(|l| str_of(l, "phase") == "succeeded")
        .map(|l| str_of(l, "name"))
        .collect();
    for name in &names {
        assert!(
            delivered.contains(name.as_str()),
            "{name} deleted without its end delivered (seed {seed})"
        );
    }
}
