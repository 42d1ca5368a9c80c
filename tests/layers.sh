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

# The layers depend only downward. Each crate may use the jobrelay crates listed after it and
# no other: the compiler then keeps the direction inside a crate, and this keeps it between.
allowed() {
  case "$1" in
    jobrelay-contract) echo "" ;;
    jobrelay-bindings) echo "jobrelay-contract" ;;
    jobrelay-watch) echo "jobrelay-contract" ;;
    jobrelay-state) echo "jobrelay-contract" ;;
    jobrelay-capabilities) echo "jobrelay-contract jobrelay-bindings jobrelay-state jobrelay-watch" ;;
    jobrelay-runtime) echo "jobrelay-contract jobrelay-bindings jobrelay-capabilities" ;;
    jobrelay-coordination) echo "" ;;
    jobrelay-fleet) echo "jobrelay-contract jobrelay-watch" ;;
    jobrelay-lanes) echo "jobrelay-contract jobrelay-fleet jobrelay-runtime jobrelay-state jobrelay-watch" ;;
    jobrelay) echo "jobrelay-contract jobrelay-bindings jobrelay-watch jobrelay-state jobrelay-capabilities jobrelay-runtime jobrelay-fleet jobrelay-lanes jobrelay-coordination" ;;
  esac
}
for crate in jobrelay-contract jobrelay-bindings jobrelay-watch jobrelay-state jobrelay-capabilities jobrelay-runtime jobrelay-fleet jobrelay-lanes jobrelay-coordination jobrelay; do
  # Direct normal dependencies only (depth 1), the crate itself on the first line.
  deps=$(cargo tree --locked -p "$crate" --no-default-features --edges normal --depth 1 \
    --prefix none | tail -n +2 | awk '{print $1}' | grep '^jobrelay' || true)
  for dep in $deps; do
    if ! grep -qw -- "$dep" <<<"$(allowed "$crate")"; then
      echo "$crate depends on $dep, which is not below it" >&2
      exit 1
    fi
  done
done
echo "layers: every crate depends only downward"
