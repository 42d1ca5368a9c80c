//! Properties of reading config files, over arbitrary and mutated input: reading never panics,
//! and every file is either accepted or refused under its own path, with the last good state
//! kept. Bounded (a few hundred cases) so it runs in every test run.

use std::path::Path;

use proptest::prelude::*;

use super::state::ConfigState;

const MAIN: &str = "kinds: [{name: volcano-job, finalizer: true}, {name: batch-job}]\n\
watch: {namespaces: [ml], label_selector: \"team=ml,!skip\", timeout_seconds: 60}\n\
plugin_defaults: {timeout_ms: 5000, memory_mb: 64, concurrency: 4}\n\
rescan_seconds: 30\n";

const MANIFEST: &str = "wasm: plugin.wasm\nkinds: [volcano-job]\ndelivery: transitions\n\
timeout_ms: 2000\nretry: {max_attempts: 3, min_delay_ms: 100, max_delay_ms: 1000}\n\
rate_limits: [{per_second: 5}]\ngrants: {kv: true, http: {allow: [\"https://example.com\"]}}\n\
config: {a: b}\n";

const KUBECONFIG: &str = "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    \
server: https://127.0.0.1:6443\n    certificate-authority-data: aGVsbG8=\ncontexts:\n- name: c\n  \
context:\n    cluster: c\n    user: u\ncurrent-context: c\nusers:\n- name: u\n  user:\n    \
token: t\n";

/// `text` with a few bytes inserted, replaced or removed.
fn mutate(text: &str, edits: &[(usize, u8, u8)]) -> Vec<u8> {
    let mut bytes = text.as_bytes().to_vec();
    for &(at, byte, how) in edits {
        let at = at % (bytes.len() + 1);
        match how % 3 {
            0 => bytes.insert(at, byte),
            1 if at < bytes.len() => bytes[at] = byte,
            _ if at < bytes.len() => {
                bytes.remove(at);
            }
            _ => {}
        }
    }
    bytes
}

/// A config folder with a good main file, manifest and kubeconfig, loaded.
fn folder() -> (tempfile::TempDir, ConfigState) {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    std::fs::create_dir_all(root.join("plugins")).expect("plugins");
    std::fs::create_dir_all(root.join("clusters")).expect("clusters");
    std::fs::write(root.join("plugin.wasm"), b"\0asm").expect("wasm");
    std::fs::write(root.join("jobrelay.yaml"), MAIN).expect("main");
    std::fs::write(root.join("plugins/p.yaml"), MANIFEST).expect("manifest");
    std::fs::write(root.join("clusters/c.yaml"), KUBECONFIG).expect("kubeconfig");
    let (state, _) = ConfigState::load(root).expect("the good folder loads");
    assert!(state.problems().is_empty(), "{:?}", state.problems());
    (dir, state)
}

/// Writes `bytes` over `file`, re-reads the folder, and checks the property.
fn check(root: &Path, state: &mut ConfigState, file: &str, bytes: &[u8]) {
    let path = root.join(file);
    std::fs::write(&path, bytes).expect("write");
    let _ = state.refresh();
    if !state.problems().contains_key(&path) {
        return; // taken (other files may now be refused because of it, rightly)
    }
    // Refused: nothing else is blamed, and what the file described keeps its last good
    // version.
    let others: Vec<_> = state.problems().keys().filter(|p| **p != path).collect();
    assert!(others.is_empty(), "another file was blamed: {others:?}");
    assert!(state.plugins().contains_key("p"), "the plugin is gone");
    assert!(state.clusters().contains_key("c"), "the cluster is gone");
    assert_eq!(state.main().kinds.len(), 2, "the main file changed");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn mutated_files_are_taken_or_refused_under_their_own_name(
        which in 0usize..3,
        edits in proptest::collection::vec((any::<usize>(), any::<u8>(), any::<u8>()), 1..8),
    ) {
        let (dir, mut state) = folder();
        let (file, text) = [
            ("jobrelay.yaml", MAIN),
            ("plugins/p.yaml", MANIFEST),
            ("clusters/c.yaml", KUBECONFIG),
        ][which];
        check(dir.path(), &mut state, file, &mutate(text, &edits));
    }

    #[test]
    fn arbitrary_bytes_are_taken_or_refused_under_their_own_name(
        which in 0usize..3,
        bytes in proptest::collection::vec(any::<u8>(), 0..512),
    ) {
        let (dir, mut state) = folder();
        let file = ["jobrelay.yaml", "plugins/p.yaml", "clusters/c.yaml"][which];
        check(dir.path(), &mut state, file, &bytes);
    }

    #[test]
    fn label_selectors_never_panic(text in "\\PC{0,64}") {
        let _ = jobrelay_contract::label_selector::check(&text);
    }
}
