//! Plugin components from an OCI registry, against a real one: Debian's `docker-registry`
//! (the CNCF distribution registry) on a private port with its own storage folder, started by
//! the test. `tests/run.sh` installs the package; without it the test fails, saying so.
//!
//! What is attacked: the pin. A digest the registry does not have, a registry that serves other
//! bytes than the digest pins (its storage edited behind its back) for the manifest or for the
//! layer, a registry that is down, and a damaged cache file.

use crate::common::plugins_dir;
use jobrelay::oci::registry::push;
use jobrelay::oci::{OciRef, OciSettings, Registries};
use jobrelay_testkit::LocalRegistry;
use sha2::Digest;

fn settings(registry: &LocalRegistry) -> OciSettings {
    OciSettings {
        plain_http: vec![registry.address.clone()],
        ..OciSettings::default()
    }
}

fn flip_last(hex: &str) -> String {
    let mut text = hex.to_string();
    let last = text.pop().expect("a digit");
    text.push(if last == '0' { '1' } else { '0' });
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pulled_components_are_verified_kept_by_content_and_refused_when_they_differ() {
    let mut registry = LocalRegistry::start();
    let wasm = std::fs::read(plugins_dir().join("event-log.wasm")).expect("built component");
    let pinned = push(
        &settings(&registry),
        &registry.address,
        "plugins/event-log",
        "v1",
        &wasm,
    )
    .await
    .expect("pushed");
    assert_eq!(pinned.tag.as_deref(), Some("v1"));
    let printed = pinned.to_string();
    assert_eq!(
        OciRef::parse(&printed).expect("the printed reference parses"),
        pinned
    );

    let cache = tempfile::tempdir().expect("tempdir");
    let registries = Registries::new(&settings(&registry), cache.path().join("oci"));
    let pulled = registries.fetch(&pinned).await.expect("pulled");
    assert_eq!(&*pulled.bytes, &wasm[..], "the component, byte for byte");
    let files = std::fs::read_dir(cache.path().join("oci"))
        .expect("cache")
        .count();
    assert_eq!(files, 2, "the manifest and the layer are kept");

    // A digest the registry does not have: refused, not retried.
    let unknown = OciRef {
        digest_hex: flip_last(&pinned.digest_hex),
        ..pinned.clone()
    };
    let fresh = Registries::new(&settings(&registry), cache.path().join("other"));
    let error = fresh.fetch(&unknown).await.expect_err("no such manifest");
    assert!(!error.is_passing(), "{error}");
    assert!(
        error
            .to_string()
            .contains("no manifest with the pinned digest"),
        "{error}"
    );

    // The registry serves other layer bytes than the manifest pins: refused.
    let layer_hex = pulled.sha256.clone();
    let mut damaged = wasm.clone();
    let middle = damaged.len() / 2;
    damaged[middle] ^= 0xff;
    std::fs::write(registry.blob_file(&layer_hex), &damaged).expect("edit the registry's storage");
    let error = fresh.fetch(&pinned).await.expect_err("the layer differs");
    assert!(!error.is_passing(), "{error}");
    assert!(
        error
            .to_string()
            .contains("the layer's bytes do not have the manifest's digest"),
        "{error}"
    );

    // A layer longer than the manifest declares: refused once the declared size is reached,
    // so the host never holds more than it agreed to.
    let mut longer = wasm.clone();
    longer.extend_from_slice(&[0u8; 4096]);
    std::fs::write(registry.blob_file(&layer_hex), &longer).expect("edit the registry's storage");
    let error = fresh.fetch(&pinned).await.expect_err("the layer is longer");
    assert!(!error.is_passing(), "{error}");
    assert!(error.to_string().contains("more than the"), "{error}");

    // ... and other manifest bytes than the reference pins: refused.
    std::fs::write(registry.blob_file(&layer_hex), &wasm).expect("restore");
    let manifest_file = registry.blob_file(&pinned.digest_hex);
    let manifest = std::fs::read(&manifest_file).expect("the manifest blob");
    let mut edited = manifest.clone();
    edited.extend_from_slice(b" ");
    std::fs::write(&manifest_file, &edited).expect("edit the manifest");
    let error = fresh
        .fetch(&pinned)
        .await
        .expect_err("the manifest differs");
    assert!(!error.is_passing(), "{error}");
    assert!(error.to_string().contains("not the pinned"), "{error}");
    std::fs::write(&manifest_file, &manifest).expect("restore");

    // The registry is down: the cache serves what was pulled; what was not is "unavailable",
    // which the daemon retries with backoff.
    registry.stop();
    let again = registries.fetch(&pinned).await.expect("from the cache");
    assert_eq!(&*again.bytes, &wasm[..]);
    let error = fresh
        .fetch(&pinned)
        .await
        .expect_err("never pulled, registry down");
    assert!(error.is_passing(), "{error}");

    // A damaged cache file is not used: it is pulled again (here: the registry is down).
    let cached_layer = cache.path().join(format!("oci/sha256-{layer_hex}.wasm"));
    std::fs::write(&cached_layer, b"not the component").expect("damage the cache");
    let error = registries
        .fetch(&pinned)
        .await
        .expect_err("damaged cache, registry down");
    assert!(error.is_passing(), "{error}");
}

/// A registry that needs a user and password: anonymous pushes and pulls are refused, the
/// credentials from `oci.credentials` (a secret reference here) work, and a missing secret is
/// named by its key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_with_credentials_is_reached_with_them_only() {
    use jobrelay::oci::registry::OciCredential;

    let registry = LocalRegistry::start_with_user("ci", HASH_OF_S3CRET);
    let wasm = std::fs::read(plugins_dir().join("noop.wasm")).expect("built component");
    let anonymous = settings(&registry);
    let error = push(&anonymous, &registry.address, "plugins/noop", "v1", &wasm)
        .await
        .expect_err("anonymous push");
    assert!(!error.to_string().contains("s3cret"), "{error}");

    // SAFETY: set once here; no other test reads this variable.
    unsafe { std::env::set_var("JOBRELAY_TEST_OCI_PASSWORD", "s3cret") };
    let mut with_user = settings(&registry);
    with_user.credentials.insert(
        registry.address.clone(),
        OciCredential {
            username: "ci".into(),
            password: "env:JOBRELAY_TEST_OCI_PASSWORD".into(),
        },
    );
    let pinned = push(&with_user, &registry.address, "plugins/noop", "v1", &wasm)
        .await
        .expect("pushed with credentials");

    let cache = tempfile::tempdir().expect("tempdir");
    let error = Registries::new(&anonymous, cache.path().join("a"))
        .fetch(&pinned)
        .await
        .expect_err("anonymous pull");
    assert!(
        error.is_passing(),
        "a secret can be fixed while the load waits: {error}"
    );
    let pulled = Registries::new(&with_user, cache.path().join("b"))
        .fetch(&pinned)
        .await
        .expect("pulled with credentials");
    assert_eq!(&*pulled.bytes, &wasm[..]);

    let mut missing = with_user.clone();
    if let Some(credential) = missing.credentials.get_mut(&registry.address) {
        credential.password = "env:JOBRELAY_TEST_OCI_NOT_SET".into();
    }
    let error = Registries::new(&missing, cache.path().join("c"))
        .fetch(&pinned)
        .await
        .expect_err("a missing secret");
    assert!(error.to_string().contains(".password"), "{error}");
}

/// bcrypt of `s3cret`, for the registry's htpasswd file.
const HASH_OF_S3CRET: &str = "$2b$12$TrRnm6mE53g8fojM8MYo8u.UDnrh2SXtHcAeLH2J8qesSUOu602sO";

/// Each way an author gets a registry wrong, provoked: the error keeps its cause (the client's
/// own message drops it) and says what to do. HTTPS to a plain-HTTP registry names
/// `--plain-http` and `oci.plain_http`; a port nobody listens on says "Connection refused";
/// the `.wasm` file's own sha256 used as the pin (the registry fails on it with a 500) points
/// to `plugin digest`, whose answer — for the file and for the tag — is the pin a push gives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registry_errors_keep_their_cause_and_say_what_to_do() {
    let registry = LocalRegistry::start();
    let file = plugins_dir().join("noop.wasm");
    let wasm = std::fs::read(&file).expect("built component");

    let tls = push(
        &OciSettings::default(),
        &registry.address,
        "plugins/noop",
        "v1",
        &wasm,
    )
    .await
    .expect_err("HTTPS to a plain-HTTP registry");
    let text = tls.to_string();
    assert!(text.contains("InvalidContentType"), "the cause: {text}");
    assert!(
        text.contains("--plain-http") && text.contains("oci.plain_http"),
        "the hint: {text}"
    );

    let pinned = push(
        &settings(&registry),
        &registry.address,
        "plugins/noop",
        "v1",
        &wasm,
    )
    .await
    .expect("pushed");
    let file_sha = hex::encode(sha2::Sha256::digest(&wasm));
    assert_ne!(file_sha, pinned.digest_hex);
    let by_file = OciRef {
        digest_hex: file_sha.clone(),
        ..pinned.clone()
    };
    let cache = tempfile::tempdir().expect("tempdir");
    let registries = Registries::new(&settings(&registry), cache.path().join("oci"));
    let text = registries
        .fetch(&by_file)
        .await
        .expect_err("the file's digest is no manifest")
        .to_string();
    assert!(text.contains("jobrelay plugin digest"), "the hint: {text}");
    assert!(text.contains("not the sha256 of the .wasm file"), "{text}");

    // `plugin digest` names the pin push gave, for the file and for the tag.
    let digest = |args: Vec<String>| async move {
        let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_jobrelay"))
            .arg("plugin")
            .arg("digest")
            .args(args)
            .output()
            .await
            .expect("jobrelay runs");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let of_file = digest(vec![file.display().to_string()]).await;
    assert_eq!(
        of_file.lines().next(),
        Some(pinned.digest().as_str()),
        "{of_file}"
    );
    assert!(
        of_file.contains(&file_sha),
        "the file's own sha256 is shown apart: {of_file}"
    );
    let of_tag = digest(vec![
        "--plain-http".into(),
        format!("oci://{}/plugins/noop:v1", registry.address),
    ])
    .await;
    assert_eq!(of_tag.trim(), pinned.to_string());

    // `plugin inspect` of the file and of the pinned reference: the same component, the same
    // pin, the world it targets and what it imports.
    let inspect = |target: String| async move {
        let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_jobrelay"))
            .args(["plugin", "inspect", "--plain-http", &target])
            .env("RUST_LOG", "warn")
            .output()
            .await
            .expect("jobrelay runs");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (code, of_file) = inspect(file.display().to_string()).await;
    assert_eq!(code, Some(0), "{of_file}");
    let (code, of_ref) = inspect(pinned.to_string()).await;
    assert_eq!(code, Some(0), "{of_ref}");
    for text in [&of_file, &of_ref] {
        assert!(text.contains(&format!("sha256: {file_sha}\n")), "{text}");
        assert!(
            text.contains(&format!("pin: {} (", pinned.digest())),
            "{text}"
        );
        assert!(text.contains("\nworld: jobrelay:plugin@"), "{text}");
        assert!(text.contains("\nexports: handle, init\n"), "{text}");
        assert!(text.contains("\n  wasi:io/streams@"), "{text}");
    }
    let garbage = cache.path().join("garbage.wasm");
    std::fs::write(&garbage, b"not a component").expect("write");
    let (code, _) = inspect(garbage.display().to_string()).await;
    assert_eq!(code, Some(2), "bytes that are no component are an error");

    // Nobody listens: the refused connection is said.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let nobody = format!("127.0.0.1:{port}");
    let down = OciRef {
        registry: nobody.clone(),
        ..pinned.clone()
    };
    let settings = OciSettings {
        plain_http: vec![nobody],
        ..OciSettings::default()
    };
    let text = Registries::new(&settings, cache.path().join("down"))
        .fetch(&down)
        .await
        .expect_err("nobody listens")
        .to_string();
    assert!(text.contains("Connection refused"), "the cause: {text}");
    assert!(text.contains("is the registry running"), "the hint: {text}");
}

/// A new version whose registry is down while an older one serves: the daemon says that the
/// serving version keeps delivering, not that events wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_pull_says_the_serving_version_goes_on() {
    use crate::memory_budget::free_listen;
    use crate::process::{Relay, config_folder, status, wait_log};
    let mut registry = LocalRegistry::start();
    let wasm = std::fs::read(plugins_dir().join("event-log.wasm")).expect("built component");
    let v1 = push(
        &settings(&registry),
        &registry.address,
        "plugins/event-log",
        "v1",
        &wasm,
    )
    .await
    .expect("pushed");
    let sim = jobrelay_testkit::SimCluster::start("alpha")
        .await
        .expect("simulator");
    let manifest = |pin: &OciRef, file: &str| {
        format!(
            "wasm: {pin}\ndelivery: every-version\ngrants:\n  filesystem:\n    - {{host: out, \
             guest: /data, writable: true}}\nconfig:\n  file: {file}\n"
        )
    };
    let dir = config_folder(&sim, "log", &manifest(&v1, "a.jsonl"));
    let listen = free_listen();
    let main = dir.path().join("jobrelay.yaml");
    let text = std::fs::read_to_string(&main).expect("main file");
    std::fs::write(
        &main,
        format!(
            "{text}oci: {{plain_http: [\"{}\"]}}\ntelemetry: {{listen: \"{listen}\"}}\n",
            registry.address
        ),
    )
    .expect("main file");
    let relay = Relay::start(dir.path(), "stuck pull");
    wait_log(&relay, "plugin version serving").await;
    // The status names the component by its own sha256 (as for a file) and the pin apart.
    // The plugins load before the endpoint listens: ask until it answers.
    let page = {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            if let Some(page) = status(listen).await {
                break page;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "/status never answered"
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    };
    let log = &page["plugins"]["log"];
    assert_eq!(
        log["serving_wasm_sha256"].as_str(),
        Some(hex::encode(sha2::Sha256::digest(&wasm)).as_str()),
        "{log}"
    );
    assert_eq!(
        log["serving_oci"].as_str(),
        Some(v1.to_string().as_str()),
        "{log}"
    );

    // Another component under another digest, never pulled, and the registry goes away.
    let other = std::fs::read(plugins_dir().join("probe.wasm")).expect("built component");
    let v2 = push(
        &settings(&registry),
        &registry.address,
        "plugins/event-log",
        "v2",
        &other,
    )
    .await
    .expect("pushed");
    registry.stop();
    std::fs::write(
        dir.path().join("plugins/log.yaml"),
        manifest(&v2, "b.jsonl"),
    )
    .expect("manifest");
    wait_log(&relay, "reason that may pass").await;
    let said: Vec<String> = relay
        .log()
        .lines()
        .filter(|l| l.contains("reason that may pass"))
        .map(str::to_string)
        .collect();
    assert!(
        said.iter()
            .all(|l| l.contains("the serving version keeps delivering") && !l.contains("wait")),
        "{said:#?}"
    );
}
