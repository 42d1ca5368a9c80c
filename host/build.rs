//! Takes the WIT of WASI (HTTP and the packages it uses) from the `wasmtime-wasi-http` crate
//! this build links, so `jobrelay plugin new --lang python` can write it into a project whose
//! world imports `wasi:http` — at exactly the version the host serves, and without a copy of
//! WASI's text in this repository.
//!
//! The crate's sources are where cargo unpacked them: `$CARGO_HOME/registry/src/*/` (by
//! default `~/.cargo`), under the version `Cargo.lock` pins. A build that cannot find them
//! (vendored sources, say) fails here with what it looked for.

use std::path::{Path, PathBuf};

/// The WASI packages written into a Python project: HTTP and every package its WIT names.
const PACKAGES: [&str; 7] = [
    "http",
    "io",
    "clocks",
    "random",
    "cli",
    "filesystem",
    "sockets",
];

fn main() {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let lock = manifest_dir.join("../Cargo.lock");
    println!("cargo:rerun-if-changed={}", lock.display());
    println!("cargo:rerun-if-env-changed=CARGO_HOME");
    let version = locked_version(&lock, "wasmtime-wasi-http");
    let deps = find_deps(&version);
    let mut code = String::from(
        "/// The WASI WIT files, as `(package, text)`.\npub const FILES: &[(&str, &str)] = &[\n",
    );
    for package in PACKAGES {
        let file = deps.join(format!("{package}.wit"));
        println!("cargo:rerun-if-changed={}", file.display());
        code.push_str(&format!(
            "    ({package:?}, include_str!({:?})),\n",
            file.display().to_string()
        ));
    }
    code.push_str("];\n");
    let http = std::fs::read_to_string(deps.join("http.wit")).expect("http.wit is readable");
    let wasi = http
        .lines()
        .find_map(|l| l.trim().strip_prefix("package wasi:http@"))
        .and_then(|v| v.strip_suffix(';'))
        .expect("http.wit declares its package version");
    code.push_str(&format!(
        "/// The WASI version of those files (`wasi:http@VERSION`).\npub const VERSION: &str = {wasi:?};\n\
         /// The `wasmtime-wasi-http` release they were taken from.\npub const FROM: &str = \"wasmtime-wasi-http {version}\";\n"
    ));
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("set by cargo")).join("wasi_wit.rs");
    std::fs::write(out, code).expect("OUT_DIR is writable");
}

/// The version of `name` the lock file pins.
fn locked_version(lock: &Path, name: &str) -> String {
    let text = std::fs::read_to_string(lock).expect("Cargo.lock is readable");
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if line.trim() == format!("name = \"{name}\"")
            && let Some(v) = lines
                .next()
                .and_then(|l| l.trim().strip_prefix("version = \""))
        {
            return v.trim_end_matches('"').to_string();
        }
    }
    panic!("{} pins no version of {name}", lock.display());
}

/// `wit/deps` of the crate's unpacked sources.
fn find_deps(version: &str) -> PathBuf {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .expect("CARGO_HOME or HOME is set");
    let registry = home.join("registry/src");
    let crate_dir = format!("wasmtime-wasi-http-{version}");
    let found = std::fs::read_dir(&registry)
        .into_iter()
        .flatten()
        .flatten()
        .map(|index| index.path().join(&crate_dir).join("wit/deps"))
        .find(|deps| deps.join("http.wit").is_file());
    found.unwrap_or_else(|| {
        panic!(
            "the WIT of WASI is taken from {crate_dir}/wit/deps in {}, which has none; \
             fetch the sources (cargo fetch) or set CARGO_HOME",
            registry.display()
        )
    })
}
