#!/usr/bin/env bash
# The whole test suite, from a fresh clone on a fresh machine: installs what it needs, builds
# the plugins, then runs formatting, lint and every test of the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

step "toolchain"
if ! rustup target list --installed | grep -qx wasm32-wasip2; then
  rustup target add wasm32-wasip2
fi
rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy rustfmt

step "plugins (wasm32-wasip2)"
plugins/build.sh

step "format"
cargo fmt --all -- --check
(cd plugins && cargo fmt --all -- --check)
(cd tests/plugins && cargo fmt --all -- --check)

step "lint"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "tests"
cargo test --workspace --locked --no-fail-fast
