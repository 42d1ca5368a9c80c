#!/usr/bin/env bash
# Builds jobrelay's container image on this machine, where no image registry is reachable and
# deploy/Dockerfile's `FROM rust:…` and `FROM debian:…` cannot be pulled:
#   - the release binary exactly as deploy/Dockerfile builds it (stripped, no `demo` feature)
#     and the shipped plugins (plugins/build.sh, skipped with --plugins-built when the caller
#     just ran it);
#   - an image FROM scratch (tests/image/Containerfile) in the Dockerfile's runtime layout:
#     /usr/local/bin/jobrelay, /opt/jobrelay/plugins/, user 10001, volumes /var/lib/jobrelay
#     and /var/lib/jobrelay/archive, plus what the binary needs to run: the shared libraries
#     `ldd` lists and the dynamic loader, CA certificates, passwd and group entries. No shell,
#     no package manager, no compiler;
#   - tagged localhost/jobrelay:test (JOBRELAY_TEST_IMAGE overrides), its size and every file
#     in it reported, target/image/contents.txt listing them;
#   - an SBOM of its Rust and Python dependencies, target/image/sbom.cdx.json (CycloneDX 1.5,
#     from cargo-cyclonedx and cyclonedx-py; the tools' own documents in target/image/sbom/).
# Installs podman and runc with apt-get, cargo-cyclonedx with cargo and cyclonedx-py with pip
# (into a virtual environment of its own) when missing. Podman runs with
# tests/image/containers.conf (runc, cgroupfs, no default ulimits). tests/e2e/image.rs runs the
# image as the chart does; tests/run.sh runs this script first.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"

image="${JOBRELAY_TEST_IMAGE:-localhost/jobrelay:test}"
out="$repo/target/image"
cyclonedx_version=0.5.9
cyclonedx_py_version=7.5.0
export CONTAINERS_CONF="$repo/tests/image/containers.conf"
podman() { command podman --runtime runc --cgroup-manager cgroupfs "$@"; }

plugins_built=false
for arg in "$@"; do
  case "$arg" in
    --plugins-built) plugins_built=true ;;
    *) echo "usage: tests/image/build.sh [--plugins-built]" >&2; exit 2 ;;
  esac
done

started=$SECONDS
phase_started=$SECONDS
phase() { # name: the time the previous phase took, then the next phase's name
  printf '    (%ds)\n--- %s\n' "$((SECONDS - phase_started))" "$1"
  phase_started=$SECONDS
}

echo "--- podman"
# (`type -P`: the executables, not the function above.)
if ! type -P podman >/dev/null || ! type -P runc >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq podman runc >/dev/null
fi
podman --version
[ -f /etc/ssl/certs/ca-certificates.crt ] || {
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq ca-certificates >/dev/null
}

if [ "$plugins_built" = false ]; then
  phase "plugins"
  plugins/build.sh >/dev/null
fi
shipped=(event-log mysql-sync feishu-notify dingtalk-notify wecom-notify slack-notify log-archive job-snapshot webhook-notify)
for name in "${shipped[@]}"; do
  [ -f "target/plugins/$name.wasm" ] || { echo "target/plugins/$name.wasm is missing: run plugins/build.sh" >&2; exit 1; }
done

phase "release build (as deploy/Dockerfile builds it)"
CARGO_PROFILE_RELEASE_STRIP=symbols \
  cargo build --release --locked -p jobrelay --bin jobrelay --no-default-features
binary="$repo/target/release/jobrelay"

phase "assemble"
context="$out/context"
rm -rf "$context"
mkdir -p "$context/base/etc/ssl/certs" "$context/base/tmp" "$context/base/etc/jobrelay" "$context/base/var/lib" \
  "$context/state/state" "$context/state/archive" "$context/plugins"
chmod 1777 "$context/base/tmp"
install -m 0755 "$binary" "$context/jobrelay"
for name in "${shipped[@]}"; do
  install -m 0644 "target/plugins/$name.wasm" "$context/plugins/"
done
install -m 0644 target/plugins/*.schema.json "$context/plugins/"
# The dynamic loader and each shared library the binary links, at the paths ldd names.
libs=$(ldd "$binary" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' | sort -u)
[ -n "$libs" ] || { echo "ldd lists no library for $binary" >&2; exit 1; }
for lib in $libs; do
  mkdir -p "$context/base$(dirname "$lib")"
  cp -L "$lib" "$context/base$lib"
done
cp -L /etc/ssl/certs/ca-certificates.crt "$context/base/etc/ssl/certs/ca-certificates.crt"
printf 'root:x:0:0:root:/root:/usr/sbin/nologin\njobrelay:x:10001:10001:jobrelay:/nonexistent:/usr/sbin/nologin\n' \
  >"$context/base/etc/passwd"
printf 'root:x:0:\njobrelay:x:10001:\n' >"$context/base/etc/group"
printf 'hosts: files dns\n' >"$context/base/etc/nsswitch.conf"
version="$("$binary" --version | awk '{ print $NF }')"

phase "podman build"
previous=$(podman image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)
podman build --quiet --pull=never --file tests/image/Containerfile \
  --label "org.opencontainers.image.version=$version" \
  --label "org.opencontainers.image.revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)" \
  --tag "$image" "$context" >/dev/null
# The build before this one, untagged now, is not kept (unless a container still uses it).
if [ -n "$previous" ] && [ "$previous" != "$(podman image inspect --format '{{.Id}}' "$image")" ]; then
  podman rmi "$previous" >/dev/null 2>&1 || true
fi

phase "what is in it"
size=$(podman image inspect --format '{{.Size}}' "$image")
container=$(podman create --pull=never "$image")
podman export "$container" | tar -tvf - | awk '{ $4 = ""; $5 = ""; print }' | sort -k4 >"$out/contents.txt"
podman rm --force "$container" >/dev/null
echo "image $image: $((size / 1000000)) MB ($size bytes), jobrelay $version"
echo "files (target/image/contents.txt):"
awk '$1 !~ /^d/ { printf "  %12d  %s\n", $3, $NF }' "$out/contents.txt"
# What a runtime image must not hold: a shell, a package manager, a compiler or interpreter.
if awk '{ print $NF }' "$out/contents.txt" |
  grep -E '(^|/)(sh|bash|dash|ash|busybox|apt|apt-get|dpkg|rpm|gcc|cc|c\+\+|rustc|cargo|python3?|perl)$'; then
  echo "the image holds a shell, package manager or compiler (above)" >&2
  exit 1
fi
# It starts as the chart starts it: uid 10001, read-only root.
podman run --rm --pull=never --user 10001:10001 --read-only --cap-drop all --network none "$image" --version

phase "SBOM"
if ! command -v cargo-cyclonedx >/dev/null 2>&1 ||
  [ "$(cargo-cyclonedx cyclonedx --version 2>/dev/null | awk '{ print $NF }')" != "$cyclonedx_version" ]; then
  cargo install --quiet --locked cargo-cyclonedx --version "$cyclonedx_version"
fi
venv="$out/tools/venv"
if [ "$("$venv/bin/cyclonedx-py" --version 2>/dev/null | awk '{ print $NF }')" != "$cyclonedx_py_version" ]; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "cyclonedx-bom==$cyclonedx_py_version"
fi
sbom="$out/sbom"
rm -rf "$sbom"
mkdir -p "$sbom"
# cargo-cyclonedx writes one document beside each member's Cargo.toml; under a name of this
# run's own, each moved out of the source tree at once (and removed on any exit).
written=".image-sbom-$$"
remove_written() { find "$repo" -path "$repo/target" -prune -o -name "$written.json" -type f -exec rm -f {} +; }
trap remove_written EXIT
cyclonedx() { # manifest target
  cargo cyclonedx --quiet --manifest-path "$1" --target "$2" --format json --spec-version 1.5 \
    --no-build-deps --all --override-filename "$written"
}
tree() { # workspace-manifest package target
  cargo tree --locked --manifest-path "$1" -p "$2" --target "$3" --edges normal --prefix none -f '{p}' --no-default-features
}
cyclonedx host/Cargo.toml x86_64-unknown-linux-gnu
mv "host/$written.json" "$sbom/jobrelay.cdx.json"
remove_written
tree Cargo.toml jobrelay x86_64-unknown-linux-gnu >"$sbom/jobrelay.tree"
rust_args=(--rust "$sbom/jobrelay.cdx.json" "$sbom/jobrelay.tree")
cyclonedx plugins/Cargo.toml wasm32-wasip2
for name in event-log mysql-sync feishu-notify dingtalk-notify wecom-notify slack-notify log-archive; do
  mv "plugins/$name/$written.json" "$sbom/$name.cdx.json"
  # The plugins are built with their default features (plugins/build.sh).
  cargo tree --locked --manifest-path plugins/Cargo.toml -p "$name" --target wasm32-wasip2 \
    --edges normal --prefix none -f '{p}' >"$sbom/$name.tree"
  rust_args+=(--rust "$sbom/$name.cdx.json" "$sbom/$name.tree")
done
remove_written
componentize_py=$(sed -n 's/^componentize_py_version=//p' plugins/build.sh)
[ -n "$componentize_py" ] || { echo "plugins/build.sh pins no componentize_py_version" >&2; exit 1; }
# The Python plugins use the standard library only: componentize-py (which brings CPython) is
# their one dependency.
echo "componentize-py==$componentize_py" >"$sbom/python-requirements.txt"
"$venv/bin/cyclonedx-py" requirements --sv 1.5 --output-reproducible \
  -o "$sbom/python.cdx.json" "$sbom/python-requirements.txt"
python3 tests/image/sbom.py "$out/sbom.cdx.json" jobrelay "$version" "${rust_args[@]}" \
  --python "$sbom/python.cdx.json" --python-plugin job-snapshot --python-plugin webhook-notify
if grep -q '"name": "jobrelay-testkit"' "$out/sbom.cdx.json"; then
  echo "the SBOM lists jobrelay-testkit, which the image's build does not link" >&2
  exit 1
fi

phase "done"
echo "image $image built in $((SECONDS - started))s; SBOM target/image/sbom.cdx.json"
