#!/usr/bin/env bash
# Builds {{name}}.wasm beside this script (adds the wasm32-wasip2 target if it is missing).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
if ! rustup target list --installed | grep -qx wasm32-wasip2; then
    rustup target add wasm32-wasip2
fi
cargo build --release --target wasm32-wasip2
cp "${CARGO_TARGET_DIR:-target}/wasm32-wasip2/release/{{crate_file}}.wasm" {{name}}.wasm
echo "built {{name}}.wasm"
