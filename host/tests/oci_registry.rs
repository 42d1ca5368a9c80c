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

fn settings(registry: &LocalRegistry) -> OciSettings {
    OciSettings {
        plain_http: vec![registry.address.clone()],
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
