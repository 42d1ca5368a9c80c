//! Plugins and config files change under a running daemon: nothing lost, nothing repeated,
//! and a bad file never displaces a good version.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jobrelay::daemon::Daemon;
use jobrelay_e2e::*;
use jobrelay_testkit::configmap::kubelet_write;
use jobrelay_testkit::{Flavor, JobDriver, SimCluster};
use serde_json::Value;

fn ids(lines: &[Value]) -> Vec<String> {
    lines
        .iter()
        .map(|l| l["id"].as_str().expect("id").to_string())
        .collect()
}

/// Drive `jobs` Volcano jobs through `cycles` restart cycles each, interleaved, with a short
/// pause between rounds so events keep flowing for a while. Returns the uids.
async fn drive(sim: SimCluster, jobs: usize, cycles: usize) -> Vec<String> {
    let mut drivers: Vec<JobDriver> = (0..jobs)
        .map(|i| {
            JobDriver::create(&sim, Flavor::Volcano, "ml", &format!("train-{i}")).expect("create")
        })
        .collect();
    for d in drivers.iter_mut() {
        d.running().expect("running");
    }
    for _ in 0..cycles {
        for d in drivers.iter_mut() {
            d.restarting().expect("restarting");
            d.running().expect("running");
        }
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    for d in drivers.iter_mut() {
        d.succeeded().expect("succeeded");
    }
    drivers.iter().map(|d| d.uid().to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_replaced_mid_stream_loses_and_repeats_nothing() {
    init_logs();
    let sim = SimCluster::start("alpha").await.expect("sim");
    let setup = Setup::new("kinds: [{name: volcano-job}]\n");
    setup.install_wasm("event-log", "ref.wasm");
    setup.install_wasm("event-log", "swap.wasm");
    // `ref` is never touched: it is the record of what every lane must get.
    setup.write_manifest(
        "ref",
        &Setup::log_manifest("ref.wasm", "ref", "events.jsonl", ""),
    );
    setup.write_manifest(
        "swap",
        &Setup::log_manifest("swap.wasm", "swap", "events.jsonl", ""),
    );
    setup.add_cluster(&sim);
    let daemon = Daemon::start(setup.config_dir())
        .await
        .expect("daemon starts");
    wait_synced(&daemon, "alpha").await;
    let first_version = wait_plugin_serving(&daemon, "swap").await;

    let driving = tokio::spawn(drive(sim.clone(), 6, 25));
    wait_for("some events through the first version", || {
        (setup.lines("swap/events.jsonl").len() >= 20).then_some(())
    })
    .await;
    // Replace the component under the running lane: the probe writes probe.jsonl instead.
    setup.install_wasm("probe", "swap.wasm");
    wait_for("the new version serving", || {
        let serving = daemon.plugins().get("swap")?.serving.clone()?;
        (serving != first_version).then_some(())
    })
    .await;
    let uids = driving.await.expect("driver finished");

    let reference = wait_for("every job succeeded in the reference lane", || {
        let lines = setup.lines("ref/events.jsonl");
        let done = uids.iter().all(|u| {
            lines
                .iter()
                .any(|l| uid_of(l) == *u && l["phase"] == "succeeded")
        });
        done.then_some(lines)
    })
    .await;
    let reference_ids: BTreeSet<String> = ids(&reference).into_iter().collect();
    assert_eq!(
        reference_ids.len(),
        reference.len(),
        "reference lane has no duplicates"
    );

    let (old, new) = wait_for("the swapped lane caught up with the reference", || {
        let old = setup.lines("swap/events.jsonl");
        let new = setup.lines("swap/probe.jsonl");
        (old.len() + new.len() >= reference.len()).then_some((old, new))
    })
    .await;
    assert!(
        !old.is_empty() && !new.is_empty(),
        "the swap happened mid-stream"
    );
    assert!(new.iter().all(|l| l["by"] == "probe"));
    let mut swapped: Vec<String> = ids(&old);
    swapped.extend(ids(&new));
    let swapped_set: BTreeSet<String> = swapped.iter().cloned().collect();
    assert_eq!(
        swapped.len(),
        swapped_set.len(),
        "no event handled twice across the reload"
    );
    assert_eq!(
        swapped_set, reference_ids,
        "no event lost across the reload"
    );

    // Per job, every event before the swap went to the old version, every later one to the new.
    let mut last_old: BTreeMap<String, u64> = BTreeMap::new();
    for l in &old {
        let e = last_old.entry(uid_of(l)).or_default();
        *e = (*e).max(rv_of(l));
    }
    for l in &new {
        if let Some(max_old) = last_old.get(&uid_of(l)) {
            assert!(rv_of(l) > *max_old, "job order kept across the swap: {l}");
        }
    }
    daemon.shutdown(Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_or_wrong_components_and_broken_yaml_leave_the_old_version_serving() {
    init_logs();
    let sim = SimCluster::start("alpha").await.expect("sim");
    let setup = Setup::new("kinds: [{name: batch-job}]\n");
    setup.install_wasm("event-log", "log.wasm");
    let manifest = Setup::log_manifest("log.wasm", "log", "events.jsonl", "");
    setup.write_manifest("log", &manifest);
    setup.add_cluster(&sim);
    let daemon = Daemon::start(setup.config_dir())
        .await
        .expect("daemon starts");
    wait_synced(&daemon, "alpha").await;
    let serving = wait_plugin_serving(&daemon, "log").await;

    let delivered = |name: &str| {
        let mut job = JobDriver::create(&sim, Flavor::Batch, "ml", name).expect("create");
        job.running().expect("running");
        job.uid().to_string()
    };
    let wait_delivered = |uid: String| {
        let setup = &setup;
        async move {
            wait_for("job delivered by the serving version", || {
                setup
                    .lines("log/events.jsonl")
                    .iter()
                    .any(|l| uid_of(l) == uid && l["phase"] == "running")
                    .then_some(())
            })
            .await
        }
    };
    let failed_reload = |daemon: &Daemon| {
        let s = daemon.plugins().get("log").cloned()?;
        let last = s.last_reload?;
        (!last.ok && s.serving.as_deref() == Some(serving.as_str())).then_some(last.error?)
    };

    // 1. Corrupt bytes.
    write_atomic(
        &setup.path("wasm/log.wasm"),
        b"\0asm\x01\0\0\0 this is not a component",
    );
    let error = wait_for("the corrupt component refused", || failed_reload(&daemon)).await;
    assert!(error.contains("log"), "the error names the plugin: {error}");
    wait_delivered(delivered("after-corrupt")).await;

    // 2. A valid component of the wrong world.
    setup.install_wasm("not-a-plugin", "log.wasm");
    let error = wait_for("the wrong-world component refused", || {
        failed_reload(&daemon).filter(|e| !e.contains("compile"))
    })
    .await;
    assert!(error.contains("log"), "{error}");
    wait_delivered(delivered("after-wrong-world")).await;

    // 3. A manifest that no longer parses.
    let manifest_path = setup.path("plugins/log.yaml");
    write_atomic(&manifest_path, b"wasm: [unclosed\n");
    wait_for("the broken manifest reported", || {
        daemon.problems().get(&manifest_path).cloned()
    })
    .await;
    wait_delivered(delivered("after-broken-yaml")).await;

    // Fixed again: the good component under a changed config becomes a new serving version.
    setup.install_wasm("event-log", "log.wasm");
    setup.write_manifest(
        "log",
        &Setup::log_manifest("log.wasm", "log", "events-2.jsonl", ""),
    );
    wait_for("a new version serving", || {
        let s = daemon.plugins().remove("log")?;
        (s.serving.as_deref() != Some(serving.as_str()) && s.last_reload.as_ref()?.ok).then_some(())
    })
    .await;
    assert!(daemon.problems().is_empty(), "{:?}", daemon.problems());
    let uid = delivered("after-fix");
    wait_for("the fixed version writes its new file", || {
        read_lines(&setup.path("out/log/events-2.jsonl"))
            .iter()
            .any(|l| uid_of(l) == uid)
            .then_some(())
    })
    .await;
    daemon.shutdown(Duration::from_secs(10)).await;
}

/// The default debounce is short (20 ms), so a component written in place in pieces, with
/// pauses longer than the debounce between them, is read half-written, more than once. Each
/// partial read must be refused with the old version serving on, events delivered meanwhile,
/// and the whole file, once written, must become the serving version through the file events
/// alone (the periodic re-scan is set out of reach).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_written_slowly_in_place_is_served_once_whole() {
    init_logs();
    let sim = SimCluster::start("alpha").await.expect("sim");
    let setup = Setup::new("");
    // The default debounce: no `debounce_ms` line.
    write_atomic(
        &setup.path("jobrelay.yaml"),
        b"plugin_dir: wasm\nstate: {path: state/jobrelay.db}\nrescan_seconds: 3600\n\
          kinds: [{name: batch-job}]\n",
    );
    setup.install_wasm("event-log", "log.wasm");
    setup.write_manifest(
        "log",
        &Setup::log_manifest("log.wasm", "log", "events.jsonl", ""),
    );
    setup.add_cluster(&sim);
    let daemon = Daemon::start(setup.config_dir())
        .await
        .expect("daemon starts");
    wait_synced(&daemon, "alpha").await;
    let old = wait_plugin_serving(&daemon, "log").await;

    let original = std::fs::read(built_wasm("event-log")).expect("built component");
    let new = with_custom_section(&original, "the second version");
    let path = setup.path("wasm/log.wasm");
    let mut jobs = Vec::new();
    {
        use std::io::Write as _;
        let mut file = std::fs::File::create(&path).expect("open the component for writing");
        for (i, piece) in new.chunks(new.len().div_ceil(6)).enumerate() {
            file.write_all(piece).expect("write a piece");
            file.flush().expect("flush");
            // A job changes while the file is half-written: the old version delivers it.
            let mut job =
                JobDriver::create(&sim, Flavor::Batch, "ml", &format!("mid-{i}")).expect("create");
            job.running().expect("running");
            jobs.push(job.uid().to_string());
            tokio::time::sleep(Duration::from_millis(60)).await;
        }
    }
    let serving = wait_for("the whole component serving", || {
        let s = daemon.plugins().remove("log")?;
        let last = s.last_reload?;
        (s.serving.as_deref() != Some(old.as_str()) && last.ok).then_some(s.serving?)
    })
    .await;
    assert_ne!(serving, old);
    assert!(daemon.problems().is_empty(), "{:?}", daemon.problems());
    wait_for("every job changed mid-write delivered", || {
        let lines = setup.lines("log/events.jsonl");
        jobs.iter()
            .all(|uid| {
                lines
                    .iter()
                    .any(|l| &uid_of(l) == uid && l["phase"] == "running")
            })
            .then_some(())
    })
    .await;
    daemon.shutdown(Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configmap_symlink_swap_of_the_plugins_folder_reloads_the_plugin() {
    init_logs();
    let sim = SimCluster::start("alpha").await.expect("sim");
    let setup = Setup::new("kinds: [{name: volcano-job}]\n");
    setup.install_wasm("event-log", "event-log.wasm");
    std::fs::remove_dir(setup.path("plugins")).expect("empty plugins folder");
    let plugins = setup.path("plugins");
    let manifest = |file: &str| Setup::log_manifest("event-log.wasm", "log", file, "");
    kubelet_write(
        &plugins,
        "..2026_11_21_09_00_00.1",
        &[("log.yaml", &manifest("first.jsonl"))],
    )
    .expect("first version");
    setup.add_cluster(&sim);
    let daemon = Daemon::start(setup.config_dir())
        .await
        .expect("daemon starts");
    wait_synced(&daemon, "alpha").await;
    let mut serving = wait_plugin_serving(&daemon, "log").await;

    let mut a = JobDriver::create(&sim, Flavor::Volcano, "ml", "a").expect("create");
    a.running().expect("running");
    wait_for("first file written", || {
        setup
            .lines("log/first.jsonl")
            .iter()
            .any(|l| uid_of(l) == a.uid())
            .then_some(())
    })
    .await;

    for (i, file) in ["second.jsonl", "third.jsonl"].iter().enumerate() {
        let stamp = format!("..2026_11_21_09_0{}_00.{}", i + 1, i + 2);
        kubelet_write(&plugins, &stamp, &[("log.yaml", &manifest(file))]).expect("swap");
        serving = wait_for("reloaded after the swap", || {
            let s = daemon.plugins().remove("log")?;
            let now = s.serving?;
            (now != serving && s.last_reload?.version == now).then_some(now)
        })
        .await;
        let mut b =
            JobDriver::create(&sim, Flavor::Volcano, "ml", &format!("b{i}")).expect("create");
        b.running().expect("running");
        wait_for("the new manifest's file written", || {
            setup
                .lines(&format!("log/{file}"))
                .iter()
                .any(|l| uid_of(l) == b.uid())
                .then_some(())
        })
        .await;
    }
    assert!(daemon.problems().is_empty(), "{:?}", daemon.problems());
    daemon.shutdown(Duration::from_secs(10)).await;
}

/// A component named by an absolute `wasm:` path outside the config and plugin folders (a
/// volume of its own) is followed like one inside: its folder is watched (its own entries
/// only), so a new version serves at once — the re-scan here is an hour away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_outside_the_plugin_folder_is_followed_by_its_folder() {
    init_logs();
    let sim = SimCluster::start("alpha").await.expect("sim");
    let setup = Setup::new("");
    write_atomic(
        &setup.path("jobrelay.yaml"),
        b"plugin_dir: wasm\nstate: {path: state/jobrelay.db}\nrescan_seconds: 3600\n\
          debounce_ms: 50\nkinds: [{name: batch-job}]\n",
    );
    let elsewhere = tempfile::tempdir().expect("a folder of its own");
    let component = elsewhere.path().join("log.wasm");
    let original = std::fs::read(built_wasm("event-log")).expect("built component");
    write_atomic(&component, &original);
    setup.write_manifest(
        "log",
        &Setup::log_manifest(&component.display().to_string(), "log", "events.jsonl", ""),
    );
    setup.add_cluster(&sim);
    let daemon = Daemon::start(setup.config_dir())
        .await
        .expect("daemon starts");
    wait_synced(&daemon, "alpha").await;
    let old = wait_plugin_serving(&daemon, "log").await;

    write_atomic(
        &component,
        &with_custom_section(&original, "a version from the other volume"),
    );
    // Within the wait's deadline, far inside the hour: only the folder watch can bring it.
    let serving = wait_for("the new version serving", || {
        let s = daemon.plugins().remove("log")?;
        (s.serving.as_deref() != Some(old.as_str())).then_some(s.serving?)
    })
    .await;
    assert_ne!(serving, old);
    daemon.shutdown(Duration::from_secs(10)).await;
}
