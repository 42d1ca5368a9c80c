//! Helpers shared by the capability tests: components from `target/plugins/`, a runtime with
//! host services, events, and the test MariaDB.
#![expect(dead_code, reason = "each test file uses its own subset")]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use jobrelay_capabilities::Grants;
use jobrelay_capabilities::Services;
use jobrelay_contract::event::{JobEvent, Phase};
use jobrelay_runtime::{PluginSpec, Runtime, RuntimeSettings};

pub const MIB: u64 = 1 << 20;

/// A local HTTP receiver that keeps every request's body whole.
pub mod receiver;

/// The test MariaDB (`mysql_url`, `unique_prefix`) and stores on both backends: one copy, in
/// the state store's own tests.
#[path = "../../state/tests/contract/support.rs"]
pub mod store;
pub use store::{mysql_url, unique_prefix};

pub fn plugins_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("target")
        .join("plugins")
}

pub fn wasm(name: &str) -> Arc<[u8]> {
    let path = plugins_dir().join(format!("{name}.wasm"));
    match std::fs::read(&path) {
        Ok(bytes) => bytes.into(),
        Err(e) => panic!(
            "cannot read {} ({e}): build the components first with `plugins/build.sh`",
            path.display()
        ),
    }
}

pub fn runtime(services: Services) -> Runtime {
    Runtime::with_services(
        RuntimeSettings {
            max_instances: 64,
            max_memory_mb: 64,
            ..RuntimeSettings::default()
        },
        services,
    )
    .expect("runtime builds")
}

/// A runtime whose plugins have a key-value store (SQLite in a temporary folder, kept as long
/// as the returned folder is).
pub async fn runtime_with_kv() -> (tempfile::TempDir, Runtime) {
    let state = tempfile::tempdir().expect("tempdir");
    let kv: Arc<dyn jobrelay_state::PluginKv> = Arc::new(
        jobrelay_state::SqliteStore::open(&state.path().join("state.db"))
            .await
            .expect("state"),
    );
    let services = Services {
        kv: Some(kv),
        ..Services::default()
    };
    (state, runtime(services))
}

pub fn spec(name: &str, component: &str, config: &[(&str, &str)], grants: Grants) -> PluginSpec {
    PluginSpec {
        name: name.into(),
        version: format!("{name}-v1"),
        wasm: wasm(component),
        wasm_sha256: String::new(),
        timeout: Duration::from_secs(10),
        memory_bytes: 32 * MIB,
        instance_reuse: 1,
        config: config
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        grants,
    }
}

/// One version of job `uid` (namespace `ml`, name `train-<uid>`, cluster `east`).
pub fn event(uid: &str, rv: &str, phase: Phase, previous: Option<Phase>, at: &str) -> JobEvent {
    JobEvent {
        id: JobEvent::make_id("east", uid, rv),
        cluster: "east".into(),
        api_version: "batch/v1".into(),
        kind: "Job".into(),
        namespace: "ml".into(),
        name: format!("train-{uid}"),
        uid: uid.into(),
        resource_version: rv.into(),
        generation: Some(1),
        phase,
        raw_phase: format!("{phase:?}"),
        reason: None,
        message: None,
        previous_phase: previous,
        transition_time: at.into(),
        labels: BTreeMap::from([("team".to_string(), "nlp".to_string())]),
        annotations: BTreeMap::new(),
        object_json: Arc::from(r#"{"kind":"Job","status":{}}"#),
        transition_key: String::new(),
        synthetic: false,
        story: None,
    }
}
