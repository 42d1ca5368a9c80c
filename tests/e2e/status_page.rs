//! The HTML status page of a running daemon, as an operator sees it: fetched over HTTP, then
//! rendered by headless Chromium (Debian's `chromium`; `tests/run.sh` installs it) into a
//! screenshot whose pixels must show the page's header and its green and red health badges.

use std::time::Duration;

use jobrelay::daemon::Daemon;
use jobrelay_e2e::*;
use jobrelay_testkit::{Flavor, JobDriver, SimCluster};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_page_reads_like_a_dashboard_in_a_real_browser() {
    init_logs();
    let sim = SimCluster::start("alpha").await.expect("sim");
    let setup = Setup::new("telemetry: {listen: \"127.0.0.1:0\"}\n");
    setup.install_wasm("event-log", "event-log.wasm");
    setup.write_manifest(
        "log",
        &Setup::log_manifest("event-log.wasm", "log", "events.jsonl", ""),
    );
    setup.add_cluster(&sim);
    // A second cluster that cannot be reached: its row shows the error.
    let dead = sim
        .kubeconfig_yaml()
        .replace(&sim.addr().to_string(), "127.0.0.1:9");
    write_atomic(&setup.path("clusters/down.yaml"), dead.as_bytes());
    let daemon = Daemon::start(setup.config_dir()).await.expect("daemon");
    let addr = daemon.telemetry_addr().expect("telemetry endpoint");
    wait_synced(&daemon, "alpha").await;
    let mut job = JobDriver::create(&sim, Flavor::PyTorch, "ml", "page-train").expect("job");
    job.running().expect("running");
    job.succeeded().expect("succeeded");
    wait_for("the job's success delivered", || {
        setup
            .lines("log/events.jsonl")
            .iter()
            .any(|l| l["phase"] == "succeeded")
            .then_some(())
    })
    .await;
    wait_for("the unreachable cluster in error", || {
        let h = daemon.clusters().get("down").cloned()?;
        (h.state == jobrelay::clusters::health::HealthState::Error).then_some(())
    })
    .await;

    let (code, html) = http_get(addr, "/").await;
    assert_eq!(code, 200);
    for needle in [
        "<title>jobrelay status</title>",
        "alpha",
        "down",
        "page-train",
        // The configured kind's name, as the main file and the job view name it.
        "<td>pytorch-job</td>",
        // Availability beside the streams' health, the last sync and credential expiry.
        "<th>availability</th>",
        ">online<",
        "<th>last sync</th>",
        "<th>credentials expire</th>",
        ">synced<",
        ">error<",
        ">log<",
    ] {
        assert!(html.contains(needle), "the page shows {needle}:\n{html}");
    }
    // What needs attention comes first: the cluster that is down, before any table.
    let attention = html
        .find("<h2>Needs attention</h2>")
        .expect("an attention section");
    let tables = html.find("<h2>Clusters</h2>").expect("the clusters table");
    assert!(attention < tables, "attention first:\n{html}");
    assert!(
        html[attention..tables].contains("cluster down: error"),
        "the down cluster heads the page:\n{html}"
    );

    let dir = tempfile::tempdir().expect("tempdir");
    let shot = dir.path().join("status.png");
    let output = tokio::time::timeout(
        Duration::from_secs(90),
        tokio::process::Command::new(chromium())
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                "--window-size=1280,900",
                &format!("--user-data-dir={}", dir.path().join("profile").display()),
                &format!("--screenshot={}", shot.display()),
                &format!("http://{addr}/"),
            ])
            .output(),
    )
    .await
    .expect("Chromium finished within 90 s")
    .expect("Chromium runs");
    assert!(
        shot.exists(),
        "no screenshot; chromium said: {}",
        String::from_utf8_lossy(&output.stderr)
    );

    let decoder = png::Decoder::new(std::io::BufReader::new(
        std::fs::File::open(&shot).expect("screenshot"),
    ));
    let mut reader = decoder.read_info().expect("a PNG");
    let mut pixels = vec![0; reader.output_buffer_size()];
    let frame = reader.next_frame(&mut pixels).expect("pixels");
    assert_eq!((frame.width, frame.height), (1280, 900));
    let channels = frame.color_type.samples();
    let pixels = &pixels[..frame.buffer_size()];
    let header = count_colour(pixels, channels, [0x1f, 0x29, 0x37]);
    let green = count_colour(pixels, channels, [0x1a, 0x7f, 0x37]);
    let red = count_colour(pixels, channels, [0xcf, 0x22, 0x2e]);
    assert!(
        header > 1280 * 30,
        "the dark header bar is drawn ({header} pixels)"
    );
    assert!(
        green > 200,
        "green badges (synced, ready phases) are drawn ({green} pixels)"
    );
    assert!(red > 100, "the red error badge is drawn ({red} pixels)");
    daemon.shutdown(Duration::from_secs(5)).await;
}
