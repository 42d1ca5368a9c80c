#!/usr/bin/env bash
# Builds jobrelay's WebAssembly components and puts them in <repo>/target/plugins/:
#   event-log.wasm     the shipped plugins (plugins/ workspace), release profile
#   feishu-notify.wasm
#   dingtalk-notify.wasm
#   wecom-notify.wasm
#   slack-notify.wasm
#   mysql-sync.wasm
#   log-archive.wasm
#   NAME.schema.json   the config schema of each of those, and of webhook-notify
#                      (plugins/NAME/config.schema.json)
#   job-snapshot.wasm  the plugins written in Python (plugins/job-snapshot,
#   webhook-notify.wasm  plugins/webhook-notify), by componentize-py; webhook-notify against the
#                      contract plus wasi:http, with the WIT of WASI from the wasmtime-wasi-http
#                      crate Cargo.lock pins (cargo's registry sources; `cargo fetch` if missing)
#   probe.wasm         test plugins (tests/plugins/ workspace), release profile
#   not-a-plugin.wasm
#   bulky.wasm         about 2 MB of code, for the reload benchmark
#   noop.wasm          does nothing, for the lane throughput benchmark
#   intruder.wasm      reaches for what it was not granted (sandbox tests)
#   stamp.wasm         appends each event id and the time of its call, for the latency benchmark
#   older.wasm         built against jobrelay:plugin@0.2.0 (wit/0.2.0/), the world before handle-fleet
#   before-queued.wasm built against jobrelay:plugin@0.2.1 (wit/0.2.1/), the world before the
#                      queued and preempted phases
#   probe-debug.wasm   probe in the dev profile: a larger component for compile-time benchmarks
# Runnable from any directory. Needs rustup (adds the wasm32-wasip2 target if missing) and
# Python 3 with pip (installs componentize-py, pinned below, if missing).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
target=wasm32-wasip2
componentize_py_version=0.25.1
target_dir="$repo/target/wasm"
out="$repo/target/plugins"

if ! rustup target list --installed | grep -qx "$target"; then
    rustup target add "$target" >/dev/null 2>&1
fi

build() { # workspace-dir profile-flag...
    local dir="$1"
    shift
    (cd "$dir" && cargo build --quiet --target "$target" --target-dir "$target_dir" "$@")
}

build "$repo/plugins" --release
build "$repo/tests/plugins" --release
build "$repo/tests/plugins" --package probe

mkdir -p "$out"
# componentize-py through the interpreter that installed it, whatever PATH holds.
componentize_py() {
    python3 -c 'import sys; from componentize_py import script; sys.argv[0] = "componentize-py"; sys.exit(script())' "$@"
}
installed="$(python3 -c 'import importlib.metadata as m; print(m.version("componentize-py"))' 2>/dev/null || true)"
if [ "$installed" != "$componentize_py_version" ]; then
    python3 -m pip install --quiet --disable-pip-version-check "componentize-py==$componentize_py_version"
fi
(cd "$repo/plugins/job-snapshot" && componentize_py -d "$repo/wit" -w plugin componentize app -o "$out/job-snapshot.wasm.tmp" >/dev/null)
mv "$out/job-snapshot.wasm.tmp" "$out/job-snapshot.wasm"

# webhook-notify imports wasi:http, so it is built as `jobrelay plugin new --lang python` builds
# a project: against a WIT folder of plugin.wit, a world `plugin-with-http` (the contract's world
# plus `wasi:http/outgoing-handler`) and deps/ with the WASI packages of the wasmtime-wasi-http
# crate the host links, at the version Cargo.lock pins, taken from where cargo unpacked it
# (`cargo fetch --locked` first if it has not). Nothing of WASI's WIT is kept in this repository.
wasi_http="$(awk '$0 == "name = \"wasmtime-wasi-http\"" { getline; gsub(/version = |"/, ""); print; exit }' "$repo/Cargo.lock")"
[ -n "$wasi_http" ] || { echo "build.sh: $repo/Cargo.lock pins no wasmtime-wasi-http" >&2; exit 1; }
wasi_deps() { # the crate's wit/deps, if cargo unpacked it
    local dir
    for dir in "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/"wasmtime-wasi-http-$wasi_http"/wit/deps; do
        if [ -f "$dir/http.wit" ]; then
            echo "$dir"
            return 0
        fi
    done
    return 1
}
if ! deps="$(wasi_deps)"; then
    (cd "$repo" && cargo fetch --locked --quiet)
    deps="$(wasi_deps)" || {
        echo "build.sh: wasmtime-wasi-http-$wasi_http/wit/deps is not in ${CARGO_HOME:-$HOME/.cargo}/registry/src even after cargo fetch" >&2
        exit 1
    }
fi
# A folder of this run's own: other builds may share target/.
mkdir -p "$repo/target"
http_wit="$(mktemp -d "$repo/target/wit-plugin-with-http.XXXXXX")"
trap 'rm -rf "$http_wit"' EXIT
cp "$repo/wit/plugin.wit" "$http_wit/plugin.wit"
for package in http io clocks random cli filesystem sockets; do
    mkdir -p "$http_wit/deps/$package"
    cp "$deps/$package.wit" "$http_wit/deps/$package/$package.wit"
done
wasi_version="$(sed -n 's/^package wasi:http@\(.*\);$/\1/p' "$deps/http.wit")"
{
    # The package line first: comments before it would be taken for the package's docs.
    grep -m1 '^package ' "$repo/wit/plugin.wit"
    echo
    echo "// The contract's world with outbound HTTP (wasi:http@$wasi_version, from wasmtime-wasi-http $wasi_http)."
    echo "world plugin-with-http {"
    echo "    include plugin;"
    echo "    import wasi:http/outgoing-handler@$wasi_version;"
    echo "}"
} >"$http_wit/python.wit"
(cd "$repo/plugins/webhook-notify" && componentize_py -d "$http_wit" -w plugin-with-http componentize app -o "$out/webhook-notify.wasm.tmp" >/dev/null)
mv "$out/webhook-notify.wasm.tmp" "$out/webhook-notify.wasm"
copy() { # source-path dest-name
    cp "$1" "$out/$2.tmp"
    mv "$out/$2.tmp" "$out/$2"
}
release="$target_dir/$target/release"
debug="$target_dir/$target/debug"
copy "$release/event_log.wasm" event-log.wasm
copy "$release/feishu_notify.wasm" feishu-notify.wasm
copy "$release/dingtalk_notify.wasm" dingtalk-notify.wasm
copy "$release/wecom_notify.wasm" wecom-notify.wasm
copy "$release/slack_notify.wasm" slack-notify.wasm
copy "$release/mysql_sync.wasm" mysql-sync.wasm
copy "$release/log_archive.wasm" log-archive.wasm
copy "$release/probe.wasm" probe.wasm
copy "$release/not-a-plugin.wasm" not-a-plugin.wasm
copy "$release/bulky.wasm" bulky.wasm
copy "$release/noop.wasm" noop.wasm
copy "$release/intruder.wasm" intruder.wasm
copy "$release/stamp.wasm" stamp.wasm
copy "$release/older.wasm" older.wasm
copy "$release/before_queued.wasm" before-queued.wasm
copy "$debug/probe.wasm" probe-debug.wasm
# Each shipped plugin's config schema beside its component, where `check` looks for it.
for name in event-log feishu-notify dingtalk-notify wecom-notify slack-notify mysql-sync log-archive webhook-notify; do
    copy "$repo/plugins/$name/config.schema.json" "$name.schema.json"
done

for name in event-log feishu-notify dingtalk-notify wecom-notify slack-notify mysql-sync log-archive job-snapshot webhook-notify probe not-a-plugin bulky noop intruder stamp older before-queued probe-debug; do
    printf '%10d bytes  %s\n' "$(wc -c <"$out/$name.wasm")" "$out/$name.wasm"
done
