//! A MariaDB server of a test's own: its own data folder and port, so a test can stop, kill
//! and restart it without touching the shared server other tests use.
//!
//! The data folder is made once with `mariadb-install-db` (under a second); the server runs with
//! `--skip-grant-tables`, so `root` without a password gets in over TCP, as on the shared test
//! server. Needs the MariaDB server package (`tests/run.sh` installs it).

use std::io;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A private MariaDB server, stopped until [`start`](PrivateMariaDb::start) is called; killed
/// when dropped.
pub struct PrivateMariaDb {
    dir: tempfile::TempDir,
    port: u16,
    child: Option<Child>,
}

/// How long a start may take before it counts as failed.
const START_DEADLINE: Duration = Duration::from_secs(60);

impl PrivateMariaDb {
    /// Makes the data folder and picks a free port; the server is not started.
    pub fn init() -> io::Result<PrivateMariaDb> {
        let dir = tempfile::tempdir()?;
        let data = dir.path().join("data");
        let out = Command::new(find("mariadb-install-db")?)
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .args(["--user=root", "--auth-root-authentication-method=normal"])
            .stdin(Stdio::null())
            .output()?;
        if !out.status.success() {
            return Err(io::Error::other(format!(
                "mariadb-install-db failed: {}",
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        Ok(PrivateMariaDb {
            dir,
            port,
            child: None,
        })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `mysql://root@127.0.0.1:<port>/test`.
    pub fn url(&self) -> String {
        format!("mysql://root@127.0.0.1:{}/test", self.port)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The server's error log, for a failing test to show.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.path("error.log")).unwrap_or_default()
    }

    pub fn running(&self) -> bool {
        self.child.is_some()
    }

    /// Starts the server and waits until it accepts connections and has the `test` database.
    pub fn start(&mut self) -> io::Result<()> {
        if self.child.is_some() {
            return Ok(());
        }
        let child = Command::new(find("mariadbd")?)
            .arg("--no-defaults")
            .arg(format!("--datadir={}", self.path("data").display()))
            .arg(format!("--port={}", self.port))
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--socket={}", self.path("sock").display()))
            .arg(format!("--pid-file={}", self.path("pid").display()))
            .arg(format!("--log-error={}", self.path("error.log").display()))
            .args([
                "--user=root",
                "--skip-grant-tables",
                "--skip-log-bin",
                "--innodb-buffer-pool-size=32M",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        self.child = Some(child);
        let started = Instant::now();
        loop {
            let ready = TcpStream::connect(("127.0.0.1", self.port)).is_ok()
                && self.client("CREATE DATABASE IF NOT EXISTS test").is_ok();
            if ready {
                return Ok(());
            }
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                self.child = None;
                return Err(io::Error::other(format!(
                    "mariadbd exited with {status}: {}",
                    self.log()
                )));
            }
            if started.elapsed() > START_DEADLINE {
                return Err(io::Error::other(format!(
                    "mariadbd did not accept connections within {START_DEADLINE:?}: {}",
                    self.log()
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Kills the server at once (SIGKILL), as a crash would, and waits for it to be gone.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Runs one statement with the `mariadb` client.
    fn client(&self, sql: &str) -> io::Result<()> {
        let out = Command::new(find("mariadb")?)
            .args(["--protocol=tcp", "-h127.0.0.1", "-uroot"])
            .arg(format!("-P{}", self.port))
            .args(["-e", sql])
            .stdin(Stdio::null())
            .output()?;
        if out.status.success() {
            Ok(())
        } else {
            Err(io::Error::other(
                String::from_utf8_lossy(&out.stderr).into_owned(),
            ))
        }
    }
}

impl Drop for PrivateMariaDb {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A MariaDB program on the PATH or in the usual Debian folders.
fn find(program: &str) -> io::Result<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    dirs.extend(["/usr/sbin", "/usr/bin"].map(PathBuf::from));
    dirs.iter()
        .map(|d| d.join(program))
        .find(|p| Path::new(p).is_file())
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("`{program}` not found: install the MariaDB server (tests/run.sh does)"),
            )
        })
}
