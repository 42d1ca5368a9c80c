#!/usr/bin/env bash
# Builds {{name}}.wasm beside this script with componentize-py (installed with pip if missing).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
version=0.25.1
installed="$(python3 -c 'import importlib.metadata as m; print(m.version("componentize-py"))' 2>/dev/null || true)"
if [ "$installed" != "$version" ]; then
    python3 -m pip install --quiet --disable-pip-version-check "componentize-py==$version"
fi
python3 -c 'import sys; from componentize_py import script; sys.argv[0] = "componentize-py"; sys.exit(script())' \
    -d wit -w plugin-with-http componentize app -o {{name}}.wasm
echo "built {{name}}.wasm"
