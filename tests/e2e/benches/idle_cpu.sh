#!/usr/bin/env bash
# CPU and memory of a `jobrelay run` process at rest, with several large plugins configured.
#
#   tests/e2e/benches/idle_cpu.sh [JOBRELAY_BINARY] [SECONDS]
#
# Builds nothing: pass the binary (default target/debug/jobrelay; build it with
# `cargo build -p jobrelay`) and have the components built (`plugins/build.sh`). Starts the
# daemon on a config folder of its own with four plugins (two copies of the 5.8 MB
# probe-debug component, two of the 2 MB bulky one), no cluster and no events, waits until
# all four serve and 10 s more, then reads its CPU time (utime + stime, /proc/PID/stat) over SECONDS (default 60)
# and prints the share of one core it used, and its RSS.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
bin="${1:-$repo/target/debug/jobrelay}"
seconds="${2:-60}"
plugins="$repo/target/plugins"
for f in probe-debug.wasm bulky.wasm; do
  [ -f "$plugins/$f" ] || { echo "missing $plugins/$f: run plugins/build.sh" >&2; exit 1; }
done

dir="$(mktemp -d)"
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$dir"' EXIT
mkdir -p "$dir/plugins" "$dir/clusters" "$dir/wasm" "$dir/out"
printf 'plugin_dir: wasm\nstate: {path: state/jobrelay.db}\n' > "$dir/jobrelay.yaml"
for i in 1 2; do
  cp "$plugins/probe-debug.wasm" "$dir/wasm/large-$i.wasm"
  cp "$plugins/bulky.wasm" "$dir/wasm/bulky-$i.wasm"
  printf 'wasm: large-%s.wasm\n' "$i" > "$dir/plugins/large-$i.yaml"
  printf 'wasm: bulky-%s.wasm\n' "$i" > "$dir/plugins/bulky-$i.yaml"
done

"$bin" run --config "$dir" > "$dir/out/log" 2>&1 &
pid=$!
# At rest means after start-up: wait until the four plugins are compiled and serving, then 10 s.
for _ in $(seq 1 600); do
  [ "$(grep -c 'plugin version serving' "$dir/out/log" || true)" -ge 4 ] && break
  kill -0 "$pid" || { cat "$dir/out/log" >&2; exit 1; }
  sleep 0.5
done
sleep 10

ticks() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
hz="$(getconf CLK_TCK)"
before="$(ticks)"
sleep "$seconds"
after="$(ticks)"
rss_kib="$(awk '/^VmRSS/ {print $2}' "/proc/$pid/status")"
awk -v a="$after" -v b="$before" -v hz="$hz" -v s="$seconds" -v rss="$rss_kib" 'BEGIN {
  printf "cpu at rest: %.3f%% of one core over %d s (%d ticks at %d Hz); RSS %.1f MiB\n",
    100 * (a - b) / hz / s, s, a - b, hz, rss / 1024 }'
