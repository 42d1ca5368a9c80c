//! A private OCI registry for tests: Debian's `docker-registry` (the CNCF distribution
//! registry) on a free port of 127.0.0.1, plain HTTP, its storage in a folder of its own,
//! stopped when dropped. `tests/run.sh` installs the package; without it, starting one panics
//! saying so (a test that needs a registry fails, it never skips).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A registry process of the test's own.
pub struct LocalRegistry {
    child: Child,
    pub address: String,
    pub storage: PathBuf,
    _dir: tempfile::TempDir,
}

impl LocalRegistry {
    /// A registry anyone may push to and pull from.
    pub fn start() -> LocalRegistry {
        LocalRegistry::launch(None)
    }

    /// A registry that needs `user` and the password whose bcrypt hash is `bcrypt`.
    pub fn start_with_user(user: &str, bcrypt: &str) -> LocalRegistry {
        LocalRegistry::launch(Some((user, bcrypt)))
    }

    fn launch(user: Option<(&str, &str)>) -> LocalRegistry {
        let binary = Path::new("/usr/bin/docker-registry");
        assert!(
            binary.exists(),
            "{} is missing: install Debian's docker-registry package (tests/run.sh does)",
            binary.display()
        );
        let dir = tempfile::tempdir().expect("tempdir");
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let storage = dir.path().join("data");
        let config = dir.path().join("config.yml");
        let mut text = format!(
            "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n",
            storage.display()
        );
        if let Some((user, bcrypt)) = user {
            let htpasswd = dir.path().join("htpasswd");
            std::fs::write(&htpasswd, format!("{user}:{bcrypt}\n")).expect("htpasswd");
            text.push_str(&format!(
                "auth:\n  htpasswd:\n    realm: jobrelay-test\n    path: {}\n",
                htpasswd.display()
            ));
        }
        std::fs::write(&config, text).expect("config");
        let child = Command::new(binary)
            .arg("serve")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("docker-registry starts");
        let address = format!("127.0.0.1:{port}");
        let started = Instant::now();
        while std::net::TcpStream::connect(&address).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "the registry did not listen on {address}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        LocalRegistry {
            child,
            address,
            storage,
            _dir: dir,
        }
    }

    /// The file the registry keeps a blob's bytes in.
    pub fn blob_file(&self, hex: &str) -> PathBuf {
        self.storage
            .join("docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }

    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for LocalRegistry {
    fn drop(&mut self) {
        self.stop();
    }
}
