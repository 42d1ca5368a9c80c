//! How fast config changes take effect, measured through the real daemon (release build):
//!
//! - cluster pickup: from a kubeconfig file written into `clusters/` to the first watch
//!   request reaching that cluster's API server, and to the cluster being synced;
//! - plugin swap: from a new ~2 MB component written over the serving one to the new version
//!   serving, compared with the time to load (compile + link + init) the same component alone.
//!
//! Run: `plugins/build.sh && cargo bench -p jobrelay-e2e --bench reload_latency`.
//! Each change is made by an atomic rename, as a careful tool or the kubelet does.

#![expect(
    clippy::print_stdout,
    reason = "a bench's figures are its output, printed for whoever runs it"
)]

use std::time::{Duration, Instant};

use jobrelay::clusters::health::HealthState;
use jobrelay::daemon::Daemon;
use jobrelay_e2e::{Setup, built_wasm, watches_opened, with_custom_section, write_atomic};
use jobrelay_runtime::{PluginSpec, Runtime, RuntimeSettings};
use jobrelay_testkit::SimCluster;

const ROUNDS: usize = 10;

fn summary(label: &str, mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let median = xs[xs.len() / 2];
    println!(
        "{label:<44} min {:>8.1} ms   median {:>8.1} ms   max {:>8.1} ms   (n={})",
        ms(xs[0]),
        ms(median),
        ms(xs[xs.len() - 1]),
        xs.len()
    );
    median
}

/// The component with a custom section appended: same code, a new content hash, so every
/// round is a real compile and never a cache hit.
fn variant(base: &[u8], round: usize) -> Vec<u8> {
    with_custom_section(base, &format!("round-{round}"))
}

async fn poll_until(mut check: impl FnMut() -> bool) -> Instant {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if check() {
            return Instant::now();
        }
        assert!(Instant::now() < deadline, "change not applied within 60 s");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

fn main_file(debounce_ms: u64) -> String {
    format!(
        "plugin_dir: wasm\nstate: {{path: state.db}}\nrescan_seconds: 30\ndebounce_ms: {debounce_ms}\n"
    )
}

async fn cluster_pickup(debounce_ms: u64) {
    let setup = Setup::new("");
    write_atomic(
        &setup.path("jobrelay.yaml"),
        main_file(debounce_ms).as_bytes(),
    );
    let daemon = Daemon::start(setup.config_dir()).await.expect("daemon");
    let mut to_watch = Vec::new();
    let mut to_sync = Vec::new();
    for i in 0..ROUNDS {
        let sim = SimCluster::start(&format!("c{i}")).await.expect("sim");
        let t0 = Instant::now();
        setup.add_cluster(&sim);
        let watched = poll_until(|| watches_opened(&sim) > 0).await;
        let synced = poll_until(|| {
            daemon
                .clusters()
                .get(sim.name())
                .is_some_and(|h| h.state == HealthState::Synced)
        })
        .await;
        to_watch.push(watched - t0);
        to_sync.push(synced - t0);
    }
    summary(
        &format!("cluster file -> first watch (debounce {debounce_ms} ms)"),
        to_watch,
    );
    summary(
        &format!("cluster file -> synced (debounce {debounce_ms} ms)"),
        to_sync,
    );
    daemon.shutdown(Duration::from_secs(5)).await;
}

async fn load_alone(base: &[u8]) {
    let runtime = Runtime::new(RuntimeSettings::default()).expect("runtime");
    let mut times = Vec::new();
    for round in 0..ROUNDS {
        let wasm = variant(base, 1000 + round);
        let spec = PluginSpec {
            name: "bulky".into(),
            version: format!("v{round}"),
            wasm: wasm.into(),
            wasm_sha256: String::new(),
            timeout: Duration::from_secs(5),
            memory_bytes: 64 << 20,
            instance_reuse: 1,
            config: Default::default(),
            grants: Default::default(),
        };
        let t0 = Instant::now();
        runtime.load(spec).await.expect("loads");
        times.push(t0.elapsed());
    }
    summary("load alone (compile + link + init), 2 MB", times);
}

async fn plugin_swap(base: &[u8], debounce_ms: u64) {
    let setup = Setup::new("");
    write_atomic(
        &setup.path("jobrelay.yaml"),
        main_file(debounce_ms).as_bytes(),
    );
    write_atomic(&setup.path("wasm/p.wasm"), &variant(base, 0));
    setup.write_manifest(
        "p",
        "wasm: p.wasm\ngrants:\n  filesystem:\n    - {host: out, guest: /data, writable: true}\n",
    );
    let daemon = Daemon::start(setup.config_dir()).await.expect("daemon");
    let mut serving = daemon.plugins()["p"].serving.clone().expect("serving");
    let mut totals = Vec::new();
    let mut overheads = Vec::new();
    for round in 1..=ROUNDS {
        let wasm = variant(base, round);
        let t0 = Instant::now();
        write_atomic(&setup.path("wasm/p.wasm"), &wasm);
        let done = poll_until(|| {
            daemon
                .plugins()
                .get("p")
                .and_then(|s| s.serving.clone())
                .is_some_and(|v| v != serving)
        })
        .await;
        let status = daemon.plugins().remove("p").expect("status");
        let load = status.last_reload.expect("reloaded").load_ms;
        let total = done - t0;
        totals.push(total);
        overheads.push(total.saturating_sub(Duration::from_secs_f64(load / 1000.0)));
        serving = status.serving.expect("serving");
    }
    summary(
        &format!("file written -> new version serving (debounce {debounce_ms} ms)"),
        totals,
    );
    summary(
        &format!("  of which not the load itself (debounce {debounce_ms} ms)"),
        overheads,
    );
    daemon.shutdown(Duration::from_secs(5)).await;
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let base = std::fs::read(built_wasm("bulky")).expect("bulky.wasm");
    println!(
        "jobrelay reload latency, {} rounds each; component {} bytes\n",
        ROUNDS,
        base.len()
    );
    for debounce in [20, 50, 200] {
        cluster_pickup(debounce).await;
    }
    load_alone(&base).await;
    for debounce in [20, 50, 200] {
        plugin_swap(&base, debounce).await;
    }
}
