#!/usr/bin/env bash
# Runs jobrelay on the example config folder against a simulated cluster: builds the plugins and
# binaries, starts `jobrelay-sim` (which writes config/clusters/example-sim.yaml and plays job
# lifecycles), and runs `jobrelay run --config config`. Events land, one JSON line each, in
# target/example/event-log/events.jsonl. Ctrl-C stops both.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

plugins/build.sh
cargo build --quiet -p jobrelay -p jobrelay-testkit --bins

mkdir -p target/example/event-log
target/debug/jobrelay-sim --kubeconfig config/clusters/example-sim.yaml "$@" &
sim=$!
cleanup() { kill "$sim" 2>/dev/null || true; rm -f config/clusters/example-sim.yaml; }
trap cleanup EXIT

echo "events: $repo/target/example/event-log/events.jsonl"
RUST_LOG="${RUST_LOG:-info,jobrelay::lanes=debug}" target/debug/jobrelay run --config config
