//! The Jobs view of the status page, as an operator sees it: a real daemon over simulated
//! clusters (one of them down) with real plugins (the event log, and the probe dead-lettering a
//! job), its pages fetched over HTTP — the same jobs as the JSON API for the same query, the
//! same refusals, pages followed by their "next page" link, a job's transitions and per-plugin
//! trace, every value escaped — then rendered by headless Chromium (Debian's `chromium`;
//! `tests/run.sh` installs it) into screenshots whose pixels must show the succeeded, failed and
//! dead-lettered badges. With `JOBRELAY_UPDATE_SCREENSHOTS=1` the list's screenshot is kept as
//! `docs/images/jobs-view.png`.

use std::path::Path;
use std::time::{Duration, Instant};

use jobrelay::daemon::Daemon;
use jobrelay_e2e::*;
use jobrelay_testkit::{Flavor, JobDriver, SimCluster};
use serde_json::Value;

/// The probe dead-letters a job labelled `giveup` at once.
const PROBE: &str = "wasm: probe.wasm\ndelivery: transitions\ntimeout_ms: 20000\n\
     grants:\n  filesystem:\n    - {host: out/probe, guest: /data, writable: true}\n";

/// A label value no page may pass through as markup.
const HOSTILE: &str = "<script>alert(\"x\")</script>";

/// The badge colours of the page's style: a succeeded (or delivered) badge, a failed phase, a
/// dead letter.
const GREEN: [u8; 3] = [0x1a, 0x7f, 0x37];
const RED: [u8; 3] = [0xcf, 0x22, 0x2e];
const DEAD: [u8; 3] = [0xa4, 0x0e, 0x26];
/// The warnings' background.
const WARNING: [u8; 3] = [0xff, 0xf8, 0xc5];

/// Renders `path` into `shot` at `width`×`height`; the pixels and their channels per pixel.
async fn screenshot(
    addr: std::net::SocketAddr,
    path: &str,
    dir: &Path,
    shot: &Path,
    (width, height): (u32, u32),
) -> (Vec<u8>, usize) {
    let output = tokio::time::timeout(
        Duration::from_secs(90),
        tokio::process::Command::new(chromium())
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                &format!("--window-size={width},{height}"),
                &format!("--user-data-dir={}", dir.join("profile").display()),
                &format!("--screenshot={}", shot.display()),
                &format!("http://{addr}{path}"),
            ])
            .output(),
    )
    .await
    .expect("Chromium finished within 90 s")
    .expect("Chromium runs");
    assert!(
        shot.exists(),
        "no screenshot of {path}; chromium said: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let decoder = png::Decoder::new(std::io::BufReader::new(
        std::fs::File::open(shot).expect("screenshot"),
    ));
    let mut reader = decoder.read_info().expect("a PNG");
    let mut pixels = vec![0; reader.output_buffer_size()];
    let frame = reader.next_frame(&mut pixels).expect("pixels");
    assert_eq!((frame.width, frame.height), (width, height));
    pixels.truncate(frame.buffer_size());
    (pixels, frame.color_type.samples())
}

/// The links to job pages, in page order.
fn job_links(html: &str) -> Vec<String> {
    html.match_indices("href=\"/jobs/")
        .map(|(at, _)| {
            let rest = &html[at + "href=\"".len()..];
            rest[..rest.find('"').expect("a closed attribute")].to_string()
        })
        .collect()
}

/// The job pages of the API's answer to the same query, in its order.
fn api_links(list: &Value) -> Vec<String> {
    job_names(list)
        .into_iter()
        .map(|name| format!("/jobs/{name}"))
        .collect()
}

/// The part of the page from `from` to the next `</section>`.
fn section<'a>(html: &'a str, from: &str) -> &'a str {
    let start = html
        .find(from)
        .unwrap_or_else(|| panic!("no {from}:\n{html}"));
    let end = html[start..]
        .find("</section>")
        .map_or(html.len(), |e| start + e);
    &html[start..end]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_jobs_view_shows_the_fleet_and_each_plugins_trace_in_a_real_browser() {
    init_logs();
    let east = SimCluster::start("east").await.expect("sim");
    let west = SimCluster::start("west").await.expect("sim");
    let setup = Setup::new(
        "kinds: [{name: volcano-job}, {name: batch-job}]\n\
         telemetry: {listen: \"127.0.0.1:0\"}\n",
    );
    setup.install_wasm("event-log", "event-log.wasm");
    setup.install_wasm("probe", "probe.wasm");
    setup.write_manifest(
        "log",
        &Setup::log_manifest("event-log.wasm", "log", "events.jsonl", ""),
    );
    setup.write_manifest("probe", PROBE);
    setup.add_cluster(&east);
    setup.add_cluster(&west);
    // A third cluster that cannot be reached: the pages warn of it.
    let dead = east
        .kubeconfig_yaml()
        .replace(&east.addr().to_string(), "127.0.0.1:9");
    write_atomic(&setup.path("clusters/down.yaml"), dead.as_bytes());
    let daemon = Daemon::start(setup.config_dir())
        .await
        .expect("daemon starts");
    let addr = daemon.telemetry_addr().expect("telemetry endpoint");
    wait_synced(&daemon, "east").await;
    wait_synced(&daemon, "west").await;

    let mut train = JobDriver::builder(Flavor::Volcano, "team-a", "train-1")
        .label("team", "nlp")
        .label("note", HOSTILE)
        .create(&east)
        .expect("create");
    train.running().expect("running");
    train.succeeded().expect("succeeded");
    let mut eval = JobDriver::builder(Flavor::Batch, "team-a", "eval")
        .label("team", "cv")
        .create(&east)
        .expect("create");
    eval.running().expect("running");
    eval.failed("").expect("failed");
    // A job deleted, then made again under its name: the new one's page lists the old one.
    let mut first = JobDriver::builder(Flavor::Batch, "team-a", "again")
        .without_pods()
        .create(&east)
        .expect("create");
    first.delete().expect("delete");
    let mut again = JobDriver::builder(Flavor::Batch, "team-a", "again")
        .create(&east)
        .expect("create again");
    again.running().expect("running");
    let mut far = JobDriver::builder(Flavor::Volcano, "team-b", "train-2")
        .label("team", "nlp")
        .create(&west)
        .expect("create");
    far.running().expect("running");
    let mut doomed = JobDriver::builder(Flavor::Volcano, "team-b", "doomed")
        .label("jobrelay.test/behave", "giveup")
        .create(&west)
        .expect("create");
    doomed.running().expect("running");

    // Settled: every live job delivered to the log in its last phase, the doomed one a dead
    // letter of the probe, the old `again` gone, the unreachable cluster failing.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, list) = get_json(addr, "/api/v1/jobs?limit=1000").await;
        let items = list["items"].as_array().cloned().unwrap_or_default();
        let live: Vec<&Value> = items.iter().filter(|j| j["deleted"].is_null()).collect();
        let settled = live.len() == 5
            && items.len() == 6
            && live.iter().all(|j| {
                j["plugins"]["log"]["pending"] == 0
                    && j["plugins"]["log"]["delivered_phase"] == j["phase"]
            })
            && live.iter().any(|j| {
                j["name"] == "doomed"
                    && j["plugins"]["probe"]["dead_letters"]
                        .as_u64()
                        .is_some_and(|n| n >= 1)
            })
            && list["warnings"].as_array().is_some_and(|w| {
                w.iter()
                    .any(|w| w.as_str().is_some_and(|w| w.contains("`down` is failing")))
            });
        if settled {
            break;
        }
        assert!(Instant::now() < deadline, "not settled: {list:#}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // The status page links to the Jobs view.
    let (code, status) = http_get(addr, "/").await;
    assert_eq!(code, 200);
    assert!(status.contains("<a href=\"/jobs\">Jobs</a>"), "{status}");

    // The list: every job, linked to its page, with what each plugin did; the warning first.
    let (code, html) = http_get(addr, "/jobs").await;
    assert_eq!(code, 200, "{html}");
    assert!(html.contains("<title>Jobs · jobrelay</title>"), "{html}");
    assert!(
        html.contains("<a href=\"/jobs\" class=\"here\">Jobs</a>"),
        "{html}"
    );
    let warnings = section(&html, "<section class=\"warnings\"");
    assert!(
        warnings.contains("cluster `down` is failing since"),
        "{warnings}"
    );
    let (_, list) = get_json(addr, "/api/v1/jobs").await;
    assert_eq!(job_links(&html), api_links(&list));
    for needle in [
        "href=\"/jobs/east/team-a/train-1\">train-1</a>",
        "href=\"/jobs/west/team-b/doomed\">doomed</a>",
        "<span class=\"badge ok\">succeeded</span>",
        "<span class=\"badge bad\">failed</span>",
        ">log: delivered succeeded</span>",
        ">log: delivered failed</span>",
        "class=\"badge dead\"",
        "volcano-job",
        "batch-job",
    ] {
        assert!(html.contains(needle), "the list shows {needle}:\n{html}");
    }
    let letters = list["items"]
        .as_array()
        .and_then(|items| items.iter().find(|j| j["name"] == "doomed"))
        .and_then(|j| j["plugins"]["probe"]["dead_letters"].as_u64())
        .expect("the doomed job's dead letters");
    let badge = format!(
        ">probe: {letters} dead letter{}</span>",
        if letters == 1 { "" } else { "s" }
    );
    assert!(html.contains(&badge), "the list shows {badge}:\n{html}");
    let (warned, listed) = (html.find("id=\"warnings\""), html.find("id=\"jobs\""));
    assert!(
        warned.is_some() && warned < listed,
        "warnings before the jobs:\n{html}"
    );
    assert!(!html.contains("<script"), "{html}");

    // The same jobs as the API for the same query, filters and orders alike.
    for query in [
        "phase=failed",
        "phase=failed&phase=succeeded",
        "labelSelector=team%3Dnlp&sort=-name",
        "cluster=west&kind=volcano-job",
        "name=train",
        "phase=deleted",
    ] {
        let (code, html) = http_get(addr, &format!("/jobs?{query}")).await;
        assert_eq!(code, 200, "{query}: {html}");
        let (_, list) = get_json(addr, &format!("/api/v1/jobs?{query}")).await;
        assert!(!api_links(&list).is_empty(), "{query}: {list}");
        assert_eq!(job_links(&html), api_links(&list), "{query}");
    }
    let (_, failed) = http_get(addr, "/jobs?phase=failed").await;
    assert_eq!(job_links(&failed), ["/jobs/east/team-a/eval"]);
    assert!(
        failed.contains("value=\"failed\" checked>"),
        "the form keeps the filter:\n{failed}"
    );

    // What the API refuses, the page refuses: the same message, 400, the form kept.
    for query in ["phase=runing", "limit=0", "sort=size", "clusters=east"] {
        let (code, html) = http_get(addr, &format!("/jobs?{query}")).await;
        assert_eq!(code, 400, "{query}: {html}");
        let (api_code, body) = get_json(addr, &format!("/api/v1/jobs?{query}")).await;
        assert_eq!(api_code, 400);
        let error = body["error"].as_str().expect("an error");
        let refused = section(&html, "<section class=\"refused\"");
        assert!(
            refused.contains(&jobrelay::telemetry::page::escape(error)),
            "{query}: {refused}"
        );
        assert!(html.contains("<form class=\"filters\""), "{html}");
    }
    let (_, html) = http_get(addr, "/jobs?phase=runing").await;
    assert!(html.contains("phase: `runing` is not a phase"), "{html}");

    // A form as a browser sends it (every field, the empty ones too), paged by its links:
    // each job once, in the API's order.
    let (_, all) = get_json(addr, "/api/v1/jobs?sort=name&limit=1000").await;
    let mut path =
        "/jobs?cluster=&namespace=&kind=&labelSelector=&name=&sort=name&limit=2".to_string();
    let mut seen = Vec::new();
    for page in 0.. {
        assert!(page < 5, "too many pages: {seen:?}");
        let (code, html) = http_get(addr, &path).await;
        assert_eq!(code, 200, "{path}: {html}");
        let links = job_links(&html);
        assert!(links.len() <= 2, "{links:?}");
        seen.extend(links);
        let Some(at) = html.find("id=\"next\" href=\"") else {
            break;
        };
        let rest = &html[at + "id=\"next\" href=\"".len()..];
        path = rest[..rest.find('"').expect("closed")].replace("&amp;", "&");
        assert!(path.contains("continue="), "{path}");
        assert!(!path.contains("cluster=&"), "empty fields dropped: {path}");
    }
    assert_eq!(seen, api_links(&all));

    // A job: its fields, labels (escaped), transitions, each plugin's state and trace.
    let (code, html) = http_get(addr, "/jobs/east/team-a/train-1").await;
    assert_eq!(code, 200, "{html}");
    assert!(!html.contains("<script"), "the label is escaped:\n{html}");
    assert!(
        html.contains("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;"),
        "{html}"
    );
    assert!(html.contains(&train.uid().to_string()), "{html}");
    let transitions = section(&html, "<section id=\"transitions\"");
    let running = transitions
        .find(">running<")
        .expect("running among the transitions");
    let succeeded = transitions
        .find(">succeeded<")
        .expect("succeeded among the transitions");
    assert!(running < succeeded, "oldest first: {transitions}");
    let plugins = section(&html, "<section id=\"plugins\"");
    assert!(plugins.contains("<h3 id=\"plugin-log\">"), "{plugins}");
    assert!(plugins.contains("<h3 id=\"plugin-probe\">"), "{plugins}");
    assert!(
        plugins.contains("<span class=\"badge ok\">delivered</span>"),
        "{plugins}"
    );
    assert!(!plugins.contains("dead-lettered"), "{plugins}");

    let (code, html) = http_get(addr, "/jobs/west/team-b/doomed").await;
    assert_eq!(code, 200, "{html}");
    let probe = &html[html.find("<h3 id=\"plugin-probe\">").expect("probe")..];
    assert!(
        probe.contains("<span class=\"badge dead\">dead-lettered</span>"),
        "{probe}"
    );
    assert!(
        probe.contains("jobrelay dead-letters list --plugin probe"),
        "{probe}"
    );
    let (_, shown) = get_json(addr, "/api/v1/jobs/west/team-b/doomed").await;
    let error = shown["plugins"]["probe"]["last_error"]
        .as_str()
        .expect("the probe's error");
    assert!(
        probe.contains(&jobrelay::telemetry::page::escape(error)),
        "{probe}"
    );
    let log = &html[html.find("<h3 id=\"plugin-log\">").expect("log")..];
    assert!(
        log.contains("<span class=\"badge ok\">delivered</span>"),
        "{log}"
    );

    // The earlier job of the same name, deleted.
    let (code, html) = http_get(addr, "/jobs/east/team-a/again").await;
    assert_eq!(code, 200, "{html}");
    let earlier = section(&html, "<section id=\"earlier\"");
    assert!(earlier.contains(first.uid()), "{earlier}");
    assert!(!earlier.contains(again.uid()), "{earlier}");

    // A job that is not here: 404, said on the page.
    let (code, html) = http_get(addr, "/jobs/east/team-a/nope").await;
    assert_eq!(code, 404, "{html}");
    assert!(
        html.contains("no job team-a/nope on cluster `east` here"),
        "{html}"
    );

    // In a real browser.
    let dir = tempfile::tempdir().expect("tempdir");
    let shot = dir.path().join("jobs.png");
    let (pixels, channels) = screenshot(addr, "/jobs", dir.path(), &shot, (1280, 900)).await;
    let header = count_colour(&pixels, channels, [0x1f, 0x29, 0x37]);
    let green = count_colour(&pixels, channels, GREEN);
    let red = count_colour(&pixels, channels, RED);
    let dead = count_colour(&pixels, channels, DEAD);
    let warning = count_colour(&pixels, channels, WARNING);
    assert!(header > 1280 * 30, "the dark header ({header} pixels)");
    assert!(
        green > 1_000,
        "green succeeded, running and delivered badges ({green} pixels)"
    );
    assert!(red > 200, "the red failed badge ({red} pixels)");
    assert!(dead > 200, "the dead-letter badge ({dead} pixels)");
    assert!(
        warning > 1280 * 20,
        "the yellow warnings band ({warning} pixels)"
    );
    if std::env::var("JOBRELAY_UPDATE_SCREENSHOTS").as_deref() == Ok("1") {
        let kept = repo_root().join("docs/images/jobs-view.png");
        std::fs::create_dir_all(kept.parent().expect("a folder")).expect("docs/images");
        std::fs::copy(&shot, &kept).expect("the screenshot kept in docs/images");
    }

    let shot = dir.path().join("doomed.png");
    let (pixels, channels) = screenshot(
        addr,
        "/jobs/west/team-b/doomed",
        dir.path(),
        &shot,
        (1280, 1400),
    )
    .await;
    let green = count_colour(&pixels, channels, GREEN);
    let dead = count_colour(&pixels, channels, DEAD);
    assert!(
        dead > 300,
        "dead-lettered badges in the probe's trace ({dead} pixels)"
    );
    assert!(
        green > 300,
        "delivered badges in the log's trace ({green} pixels)"
    );
    daemon.shutdown(Duration::from_secs(5)).await;
}
