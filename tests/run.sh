#!/usr/bin/env bash
# The whole test suite, from a fresh clone on a fresh machine: installs what it needs, builds
# the plugins, then runs formatting, lint, the container image's build and every test of the
# workspace.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

step "disk"
# A full test build needs a few GiB; say how much there is, so a full disk is easy to spot.
df -h . | tail -n 1

step "toolchain"
if ! rustup target list --installed | grep -qx wasm32-wasip2; then
  rustup target add wasm32-wasip2
fi
rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy rustfmt

step "mariadb"
# Tests that need MariaDB connect to 127.0.0.1:3306 as root with an empty password (override
# with JOBRELAY_TEST_MYSQL_URL) and fail, never skip, when it is unreachable. Start the server
# if it is installed but stopped; install it if it is missing.
if [ -z "${JOBRELAY_TEST_MYSQL_URL:-}" ]; then
  # `ping` succeeds whenever the server answers, even if root may not log in over TCP yet.
  mariadb_up() { mysqladmin --protocol=tcp -h127.0.0.1 -P3306 -uroot ping >/dev/null 2>&1; }
  if ! mariadb_up; then
    if [ ! -x /usr/sbin/mariadbd ]; then
      export DEBIAN_FRONTEND=noninteractive
      apt-get update -qq && apt-get install -y -qq mariadb-server >/dev/null
    fi
    mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld 2>/dev/null || true
    start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd -- --user=mysql
    for _ in $(seq 1 60); do mariadb_up && break; sleep 1; done
  fi
  mariadb_up || { echo "MariaDB did not come up on 127.0.0.1:3306" >&2; exit 1; }
  # Root over TCP with an empty password, as the tests expect (a fresh Debian install lets
  # root in through the unix socket only).
  if ! mysql --protocol=tcp -h127.0.0.1 -uroot -e "SELECT 1" >/dev/null 2>&1; then
    mysql -uroot -e "ALTER USER 'root'@'localhost' IDENTIFIED VIA mysql_native_password USING PASSWORD('')"
  fi
  mysql --protocol=tcp -h127.0.0.1 -uroot -e "CREATE DATABASE IF NOT EXISTS test"
fi

step "docker-registry"
# The OCI tests start a private registry of their own (Debian's docker-registry, the CNCF
# distribution registry) on a free port; install the package if missing. Its system service
# is not used.
if [ ! -x /usr/bin/docker-registry ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq docker-registry >/dev/null
fi

step "chromium"
# The status page test renders the page in headless Chromium; install it if missing.
if ! command -v chromium >/dev/null 2>&1 && [ -z "${JOBRELAY_TEST_CHROMIUM:-}" ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq chromium >/dev/null
fi

step "helm and promtool"
# The chart tests render the chart with real Helm; the alert tests run promtool on its rules.
tests/tools/install.sh

step "plugins (wasm32-wasip2)"
plugins/build.sh

step "format"
cargo fmt --all -- --check
(cd plugins && cargo fmt --all -- --check)
(cd tests/plugins && cargo fmt --all -- --check)

step "lint"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "layers"
tests/layers.sh

step "shape"
# Files past 800 product lines and errors as strings, each only on its allow-list.
tests/shape.sh

step "alerts"
# The chart's alert rules, rendered by real Helm, under promtool check and unit tests.
tests/alerts/run.sh

step "image"
# The container image, built here with podman FROM scratch (no registry is reachable for
# deploy/Dockerfile's bases; podman is installed if missing), its size, files and SBOM; the
# e2e test image:: runs it as the chart does.
tests/image/build.sh --plugins-built

step "tests"
# The plugins' own logic (cards, SQL text, settings) is plain Rust, tested natively.
(cd plugins && cargo test --locked --no-fail-fast)
python3 -m unittest discover plugins/webhook-notify/tests
cargo test --workspace --locked --no-fail-fast
