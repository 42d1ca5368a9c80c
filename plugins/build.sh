#!/usr/bin/env bash
# Builds jobrelay's WebAssembly components and puts them in <repo>/target/plugins/:
#   event-log.wasm     the shipped plugins (plugins/ workspace), release profile
#   feishu-notify.wasm
#   dingtalk-notify.wasm
#   wecom-notify.wasm
#   slack-notify.wasm
#   mysql-sync.wasm
#   log-archive.wasm
#   NAME.schema.json   the config schema of each of those (plugins/NAME/config.schema.json)
#   job-snapshot.wasm  the plugin written in Python (plugins/job-snapshot), by componentize-py
#   probe.wasm         test plugins (tests/plugins/ workspace), release profile
#   not-a-plugin.wasm
#   bulky.wasm         about 2 MB of code, for the reload benchmark
#   noop.wasm          does nothing, for the lane throughput benchmark
#   intruder.wasm      reaches for what it was not granted (sandbox tests)
#   stamp.wasm         appends each event id and the time of its call, for the latency benchmark
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
copy "$debug/probe.wasm" probe-debug.wasm
# Each shipped plugin's config schema beside its component, where `check` looks for it.
for name in event-log feishu-notify dingtalk-notify wecom-notify slack-notify mysql-sync log-archive; do
    copy "$repo/plugins/$name/config.schema.json" "$name.schema.json"
done

for name in event-log feishu-notify dingtalk-notify wecom-notify slack-notify mysql-sync log-archive job-snapshot probe not-a-plugin bulky noop intruder stamp probe-debug; do
    printf '%10d bytes  %s\n' "$(wc -c <"$out/$name.wasm")" "$out/$name.wasm"
done
