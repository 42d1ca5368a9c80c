#!/usr/bin/env bash
# Checks what the compiler alone does not: the production build of the daemon (no default
# features, as deploy/Dockerfile builds it) compiles cleanly and links no test code.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo clippy --locked -p jobrelay --no-default-features --lib --bins -- -D warnings

# The production dependency graph, normal edges only: the test kit (the Kubernetes simulator
# and the fake Feishu) must not be in it.
graph=$(cargo tree --locked -p jobrelay --no-default-features --edges normal --prefix none)
if grep -q '^jobrelay-testkit ' <<<"$graph"; then
  echo "the production build of jobrelay links jobrelay-testkit:" >&2
  cargo tree --locked -p jobrelay --no-default-features --edges normal --invert jobrelay-testkit >&2
  exit 1
fi
echo "production build: no test kit"
