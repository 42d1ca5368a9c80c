#!/usr/bin/env bash
# The chart's alerts, as Prometheus will run them: the PrometheusRule rendered by real Helm in
# each coordination mode, its groups written out as a plain rule file, `promtool check rules`
# on it and `promtool test rules` on the unit tests beside this script (*.test.yaml), which
# name the rendered file they test in `rule_files`. Before that, every alert is checked to
# carry severity, summary, description and a runbook_url whose anchor is a "### <alert>"
# section of docs/operations.md's "## Runbook", and to have a unit test where it fires and one
# where it must not. Needs helm, promtool and python3 with PyYAML (tests/tools/install.sh).
# Run from anywhere: tests/alerts/run.sh. Exits non-zero on any failure.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
here="$root/tests/alerts"
chart="$root/deploy/helm/jobrelay"
for tool in helm promtool python3; do
  command -v "$tool" >/dev/null || { echo "tests/alerts: $tool is missing (tests/tools/install.sh)" >&2; exit 1; }
done
python3 -c 'import yaml' 2>/dev/null || { echo "tests/alerts: python3 lacks PyYAML" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The release every test file assumes: `t` in namespace `platform`, so the rules select
# job="t-metrics", namespace="platform". Leader and sharded modes need a shared store, and
# the state volume is a claim (production values). The job SLI alerts, off by default, are
# switched on so that they are tested too.
render() { # MODE [helm args...] -> the PrometheusRule on stdout
  local mode=$1
  shift
  local args=(--set metrics.prometheusRule.enabled=true --set "coordination.mode=$mode"
    --set persistence.enabled=true --set metrics.prometheusRule.jobs.enabled=true)
  if [ "$mode" != single ]; then
    args+=(--set stateUrl=env:JOBRELAY_STATE_URL)
  fi
  helm template t "$chart" --namespace platform "${args[@]}" "$@" \
    --show-only templates/prometheusrule.yaml
}

# The PrometheusRule's spec.groups as a plain Prometheus rule file.
extract() { # RULE_YAML OUT
  python3 - "$1" "$2" <<'EOF'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
rules = [d for d in docs if d.get("kind") == "PrometheusRule"]
assert len(rules) == 1, f"expected one PrometheusRule, found {len(rules)}"
with open(sys.argv[2], "w") as out:
    yaml.safe_dump({"groups": rules[0]["spec"]["groups"]}, out, sort_keys=False, width=1000)
EOF
}

echo "== rendering the PrometheusRule (helm $(helm version --short))"
for mode in single leader sharded; do
  render "$mode" >"$work/$mode.prometheusrule.yaml"
  extract "$work/$mode.prometheusrule.yaml" "$work/rules-$mode.yaml"
done
# Off by default: no PrometheusRule at all.
if helm template t "$chart" --namespace platform | grep -q '^kind: PrometheusRule'; then
  echo "FAIL: a PrometheusRule is rendered without metrics.prometheusRule.enabled" >&2
  exit 1
fi
# The job SLI alerts are about the users' jobs: off unless metrics.prometheusRule.jobs.enabled.
helm template t "$chart" --namespace platform --set metrics.prometheusRule.enabled=true \
  --show-only templates/prometheusrule.yaml >"$work/default.prometheusrule.yaml"
if grep -Eq 'alert: (JobrelayJobFailureRatioHigh|JobrelayJobQueueWaitHigh)' "$work/default.prometheusrule.yaml"; then
  echo "FAIL: a job SLI alert is rendered without metrics.prometheusRule.jobs.enabled" >&2
  exit 1
fi
# Every switch of the values at once (an alert off, one re-graded, labels on all and on one):
# the rules stay valid for promtool (checked below with the others).
render sharded --set metrics.prometheusRule.alerts.JobrelayDeliverySlow.enabled=false \
  --set metrics.prometheusRule.alerts.JobrelayLaneBehind.severity=critical \
  --set metrics.prometheusRule.alerts.JobrelayLaneBehind.labels.receiver=pager \
  --set metrics.prometheusRule.additionalRuleLabels.team=platform >"$work/switched.prometheusrule.yaml"
extract "$work/switched.prometheusrule.yaml" "$work/rules-switched.yaml"
# The Lease duration sets the coordination rules' `for`.
render leader --set coordination.leaseDurationSeconds=40 >"$work/leader-40.yaml"
render sharded --set coordination.leaseDurationSeconds=40 >"$work/sharded-40.yaml"
# runbookUrl replaces the runbook's address. Rendered from a copy of the chart without its
# values schema, so the template's own handling is tested whether or not the schema lists
# the key yet.
cp -r "$chart" "$work/chart"
rm -f "$work/chart/values.schema.json"
helm template t "$work/chart" --namespace platform --set metrics.prometheusRule.enabled=true \
  --set metrics.prometheusRule.runbookUrl=https://wiki.example.com/jobrelay/runbook \
  --show-only templates/prometheusrule.yaml >"$work/runbook-url.yaml"
helm template t "$work/chart" --namespace platform --set metrics.prometheusRule.enabled=true \
  --set metrics.prometheusRule.runbookUrl= \
  --show-only templates/prometheusrule.yaml >"$work/runbook-url-empty.yaml"

echo "== checking every alert's labels, annotations, runbook section and tests"
python3 - "$work" "$root" "$here" <<'EOF'
import glob, os, re, sys, yaml
work, root, here = sys.argv[1:4]
default_runbook = "https://github.com/example/jobrelay/blob/main/docs/operations.md"
problems = []

def rules(path):
    if path.endswith(".prometheusrule.yaml") or not os.path.basename(path).startswith("rules-"):
        docs = [d for d in yaml.safe_load_all(open(path)) if d]
        groups = docs[0]["spec"]["groups"]
    else:
        groups = yaml.safe_load(open(path))["groups"]
    return [r for g in groups for r in g["rules"]]

# GitHub's anchor of a heading: lower case, punctuation but - and _ dropped, spaces to -.
def anchor(heading):
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")

ops = open(os.path.join(root, "docs/operations.md")).read()
runbook = ops.split("\n## Runbook\n", 1)
if len(runbook) != 2:
    problems.append('docs/operations.md has no "## Runbook" section')
    sections = set()
else:
    body = runbook[1].split("\n## ", 1)[0]
    sections = {m.group(1).strip() for m in re.finditer(r"^### (.+)$", body, re.M)}
all_anchors = {anchor(m.group(1)) for m in re.finditer(r"^#+ (.+)$", ops, re.M)}

by_mode = {m: rules(os.path.join(work, f"rules-{m}.yaml")) for m in ("single", "leader", "sharded")}
names = {m: {r["alert"] for r in rs if "alert" in r} for m, rs in by_mode.items()}
coordination = {"JobrelayLeaderCount": "leader", "JobrelayShardCoverage": "sharded"}
for name, mode in coordination.items():
    for m in names:
        if (name in names[m]) != (m == mode):
            problems.append(f"{name} {'missing from' if m == mode else 'rendered in'} mode {m}")
common = names["single"]
for m in ("leader", "sharded"):
    if names[m] - set(coordination) != common:
        problems.append(f"mode {m} renders other common alerts than single: {sorted(names[m] ^ common)}")

everything = [r for rs in by_mode.values() for r in rs]
for r in everything:
    name = r.get("alert")
    if not name:
        problems.append(f"a recording rule or nameless rule: {r}")
        continue
    sev = r.get("labels", {}).get("severity")
    if sev not in ("warning", "critical"):
        problems.append(f"{name}: severity {sev!r}")
    ann = r.get("annotations", {})
    for key in ("summary", "description", "runbook_url"):
        if not str(ann.get(key, "")).strip():
            problems.append(f"{name}: no {key}")
    for key, text in ann.items():
        if "{{" in text and not re.search(r"\{\{ [$.a-zA-Z]", text):
            problems.append(f"{name}: {key} has a mangled template: {text}")
        if "<no value>" in text:
            problems.append(f"{name}: {key} lost a Helm value: {text}")
    url = ann.get("runbook_url", "")
    base, _, fragment = url.partition("#")
    if base != default_runbook:
        problems.append(f"{name}: runbook_url {url} is not on {default_runbook}")
    if fragment != anchor(name):
        problems.append(f"{name}: runbook_url anchor #{fragment}, its section's is #{anchor(name)}")
    if name not in sections:
        problems.append(f'{name}: no "### {name}" under "## Runbook" in docs/operations.md')
    if fragment not in all_anchors:
        problems.append(f"{name}: docs/operations.md has no heading with anchor #{fragment}")
for section in sections - {r["alert"] for r in everything}:
    problems.append(f'docs/operations.md: runbook section "### {section}" names no alert')

for path, expect in (("leader-40.yaml", "40s"), ("sharded-40.yaml", "40s")):
    for r in rules(os.path.join(work, path)):
        if r["alert"] in coordination and r.get("for") != expect:
            problems.append(f"{path}: {r['alert']} for {r.get('for')!r}, expected {expect}")
for path, base in (("runbook-url.yaml", "https://wiki.example.com/jobrelay/runbook"),
                   ("runbook-url-empty.yaml", default_runbook)):
    for r in rules(os.path.join(work, path)):
        if r["annotations"]["runbook_url"] != f"{base}#{anchor(r['alert'])}":
            problems.append(f"{path}: {r['alert']} runbook_url {r['annotations']['runbook_url']}")

# Every alert: a test case where it fires and one where it must not.
fires, silent = set(), set()
for path in sorted(glob.glob(os.path.join(here, "*.test.yaml"))):
    for test in yaml.safe_load(open(path)).get("tests", []):
        for case in test.get("alert_rule_test", []):
            (fires if case.get("exp_alerts") else silent).add(case["alertname"])
for name in sorted({r["alert"] for r in everything}):
    if name not in fires:
        problems.append(f"{name}: no unit test where it fires")
    if name not in silent:
        problems.append(f"{name}: no unit test where it must not fire")

problems = list(dict.fromkeys(problems))  # each once, though the modes share rules
for p in problems:
    print("FAIL:", p, file=sys.stderr)
if problems:
    sys.exit(1)
print(f"{len({r['alert'] for r in everything})} alerts, each with severity, summary, "
      "description, a runbook section and a firing and a silent test")
EOF

echo "== promtool check rules"
for mode in single leader sharded switched; do
  promtool check rules "$work/rules-$mode.yaml"
done

echo "== promtool test rules"
cp "$here"/*.test.yaml "$work/"
(cd "$work" && promtool test rules ./*.test.yaml)
echo "alert tests passed"
