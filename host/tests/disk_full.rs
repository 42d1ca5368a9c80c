//! The inbox's disk full: the state file lives on a tmpfs of 3 MiB that this test mounts
//! (and grows back), the way a PersistentVolume fills up.
//!
//! 600 Volcano jobs run while `slow` is held to 20 calls a second, so its backlog is taken into
//! the inbox until the disk is full. The daemon must then say so — `/readyz` answers 503
//! naming the state store and its error — keep running, and lose nothing: once the tmpfs is
//! grown again (and the slow plugin's limit lifted), `/readyz` is 200 again and `slow` has
//! every version `witness` logged, in each job's order.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use jobrelay_testkit::SimCluster;

use crate::memory_budget::{
    config_folder, create_jobs, every_version_in_order, free_listen, logged, plugin, witnessed,
};
use crate::process::{DEADLINE, Relay, http_get};

const JOBS: usize = 600;

/// A tmpfs mounted at `dir` for the test's life; unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    /// Mounts one of `size` (as `mount -o size=` takes it). A machine where this test cannot
    /// mount fails it: the test must run, not skip.
    fn mount(dir: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(dir).expect("mount point");
        let done = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .output()
            .expect("run mount");
        assert!(
            done.status.success(),
            "cannot mount a tmpfs at {} (this test needs root): {}",
            dir.display(),
            String::from_utf8_lossy(&done.stderr)
        );
        Tmpfs(dir.to_path_buf())
    }

    fn resize(&self, size: &str) {
        let done = Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(&self.0)
            .output()
            .expect("run mount");
        assert!(
            done.status.success(),
            "cannot grow the tmpfs: {}",
            String::from_utf8_lossy(&done.stderr)
        );
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// `/readyz`: its status line and body.
async fn readyz(listen: std::net::SocketAddr) -> Option<(String, String)> {
    http_get(listen, "/readyz").await.ok()
}

async fn until_ready(listen: std::net::SocketAddr, ready: bool, relay: &Relay) -> String {
    let started = Instant::now();
    loop {
        if let Some((head, body)) = readyz(listen).await
            && head.contains(if ready { " 200" } else { " 503" })
        {
            return body;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "/readyz never said {}\n{}",
            if ready { "ready" } else { "not ready" },
            relay.tail()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_is_said_by_readiness_and_loses_nothing_once_space_returns() {
    let sim = SimCluster::start("alpha").await.expect("simulator");
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().to_path_buf();
    let listen = free_listen();
    config_folder(&config, &sim, Some(listen));
    let disk = Tmpfs::mount(&config.join("state"), "3m");

    let relay = Relay::start(&config, "on a small disk");
    until_ready(listen, true, &relay).await;
    let _drivers = create_jobs(&sim, JOBS);
    let body = until_ready(listen, false, &relay).await;
    println!("/readyz with the disk full: {}", body.trim());
    assert!(
        body.contains("state store") && body.contains("full"),
        "the reason names the state store and the full disk: {body}"
    );
    assert!(
        relay.log().contains("database or disk is full"),
        "the log says why writes fail\n{}",
        relay.tail()
    );
    let before = logged(&config, "slow");

    disk.resize("256m");
    plugin(&config, "slow", "");
    until_ready(listen, true, &relay).await;
    let seen = witnessed(&config, JOBS, &relay, Some(listen)).await;
    let repeated = every_version_in_order(&config, &seen, &relay, before).await;
    let total: usize = seen.values().map(Vec::len).sum();
    println!(
        "space back: all {total} versions delivered ({before} before), {repeated} repeated; \
         ready again"
    );
    drop(relay);
    drop(disk);
}
