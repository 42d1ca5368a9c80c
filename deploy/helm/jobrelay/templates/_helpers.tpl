{{/*
Labels on every object: the selector labels, plus the chart's and the app's versions and the
tool that manages the release (the labels Kubernetes recommends).
*/}}
{{- define "jobrelay.labels" -}}
{{ include "jobrelay.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end }}

{{/*
Labels that select this release's pods: they never change on upgrade, since a Deployment's
selector cannot. The name is nameOverride, else the chart's name.
*/}}
{{- define "jobrelay.selectorLabels" -}}
app.kubernetes.io/name: {{ .Values.nameOverride | default .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
The pods' service account: serviceAccount.name, else the release's name.
*/}}
{{- define "jobrelay.serviceAccountName" -}}
{{ .Values.serviceAccount.name | default .Release.Name }}
{{- end }}

{{/*
The image: repository@digest when image.digest is set (the tag is then not used), else
repository:tag.
*/}}
{{- define "jobrelay.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- end -}}
{{- end }}

{{/*
The built-in job kinds by name: their API group and resource (as host/watch/src/kinds.rs has
them; tests/e2e/chart.rs checks the two agree).
*/}}
{{- define "jobrelay.builtinKinds" -}}
batch-job: {group: batch, plural: jobs}
volcano-job: {group: batch.volcano.sh, plural: jobs}
pytorch-job: {group: kubeflow.org, plural: pytorchjobs}
mpi-job: {group: kubeflow.org, plural: mpijobs}
mpi-job-v1: {group: kubeflow.org, plural: mpijobs}
train-job: {group: trainer.kubeflow.org, plural: trainjobs}
jobset: {group: jobset.x-k8s.io, plural: jobsets}
ray-job: {group: ray.io, plural: rayjobs}
{{- end }}

{{/*
The rules jobrelay needs on the cluster it runs in, from the main file's kinds (config.kinds,
or the four kinds watched when it lists none): list and watch each kind's resource, plus get
and patch where the kind has `finalizer: true` (on every watched kind when a plugin's manifest
grants `job`: it annotates or labels its jobs), plus delete on the kinds some rule of
config.cleanup names in its `kinds` (clean-up deletes those jobs once finished), unless
config.cleanup.dry_run is true (a dry run only logs and counts, it never deletes); a kind whose
`clusters:` does not match homeCluster.name is not watched there and gets nothing. Pods (list)
and their logs (get) only when a plugin's manifest grants `pod_logs`. Nothing else.
*/}}
{{- define "jobrelay.homeRules" -}}
{{- $builtins := include "jobrelay.builtinKinds" . | fromYaml }}
{{- $kinds := .Values.config.kinds | default (list (dict "name" "batch-job") (dict "name" "volcano-job") (dict "name" "pytorch-job") (dict "name" "mpi-job")) }}
{{- $home := .Values.homeCluster.name }}
{{- $deleted := include "jobrelay.cleanupKinds" . | fromJsonArray }}
{{- $resources := dict }}
{{- $deletes := dict }}
{{- $kueue := false }}
{{- $podWatch := false }}
{{- range $i, $kind := $kinds }}
{{- $watched := true }}
{{- if $kind.clusters }}
{{- $watched = false }}
{{- range $kind.clusters }}
{{- if regexMatch (printf "^%s$" (regexQuoteMeta . | replace "\\*" ".*")) $home }}
{{- $watched = true }}
{{- end }}
{{- end }}
{{- end }}
{{- if $watched }}
{{- $group := "" }}
{{- $plural := "" }}
{{- if hasKey $kind "group" }}
{{- $group = $kind.group }}
{{- $plural = required (printf "config.kinds[%d] (%s): a custom kind needs `plural`" $i $kind.name) $kind.plural }}
{{- else if hasKey $builtins $kind.name }}
{{- $builtin := get $builtins $kind.name }}
{{- $group = $builtin.group }}
{{- $plural = $builtin.plural }}
{{- else }}
{{- fail (printf "config.kinds[%d]: `%s` is not a built-in kind (%s); a custom kind gives group, version, kind, plural and normalizer" $i $kind.name (keys $builtins | sortAlpha | join ", ")) }}
{{- end }}
{{- $key := printf "%s/%s" $group $plural }}
{{- $held := or (get $resources $key | default false) ($kind.finalizer | default false) (eq (include "jobrelay.jobWrites" $) "true") }}
{{- $_ := set $resources $key $held }}
{{- $_ := set $deletes $key (or (get $deletes $key | default false) (has $kind.name $deleted)) }}
{{- if and (kindIs "map" $kind.story) $kind.story.kueue }}
{{- $kueue = true }}
{{- end }}
{{- if and (kindIs "map" $kind.story) $kind.story.pods }}
{{- $podWatch = true }}
{{- end }}
{{- end }}
{{- end }}
{{- range $key := keys $resources | sortAlpha }}
{{- $parts := splitList "/" $key }}
- apiGroups: [{{ index $parts 0 | quote }}]
  resources: [{{ index $parts 1 }}]
  verbs: [list, watch{{ if get $resources $key }}, get, patch{{ end }}{{ if get $deletes $key }}, delete{{ end }}]
{{- end }}
{{- if $kueue }}
- apiGroups: ["kueue.x-k8s.io"]
  resources: [workloads]
  verbs: [list, watch]
{{- end }}
{{- if $podWatch }}
- apiGroups: [""]
  resources: [pods]
  verbs: [list, watch]
{{- end }}
{{- if eq (include "jobrelay.podLogs" .) "true" }}
{{- if not $podWatch }}
- apiGroups: [""]
  resources: [pods]
  verbs: [list]
{{- end }}
- apiGroups: [""]
  resources: [pods/log]
  verbs: [get]
{{- end }}
{{- end }}

{{/*
The kind names jobrelay's clean-up deletes, as a JSON list: every name in the `kinds` of a rule
of config.cleanup; none when config.cleanup.dry_run is true (a dry run never calls DELETE).
*/}}
{{- define "jobrelay.cleanupKinds" -}}
{{- $names := list }}
{{- $cleanup := dict }}
{{- if and (hasKey .Values.config "cleanup") (kindIs "map" .Values.config.cleanup) }}
{{- $cleanup = .Values.config.cleanup }}
{{- end }}
{{- if and (not $cleanup.dry_run) (kindIs "slice" $cleanup.rules) }}
{{- range $cleanup.rules }}
{{- if and (kindIs "map" .) (kindIs "slice" .kinds) }}
{{- range .kinds }}
{{- $names = append $names (toString .) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- $names | uniq | toJson }}
{{- end }}

{{/*
"true" when some plugin's manifest grants job (it annotates or labels its jobs, which takes
get and patch on the kinds), else "false".
*/}}
{{- define "jobrelay.jobWrites" -}}
{{- $writes := false }}
{{- range $name, $manifest := .Values.plugins }}
{{- if and (kindIs "map" $manifest) (kindIs "map" $manifest.grants) }}
{{- if hasKey $manifest.grants "job" }}
{{- $writes = true }}
{{- end }}
{{- end }}
{{- end }}
{{- $writes }}
{{- end }}

{{/*
"true" when some plugin's manifest grants pod_logs (its job's pods are then listed and their
logs read), else "false".
*/}}
{{- define "jobrelay.podLogs" -}}
{{- $podLogs := false }}
{{- range $name, $manifest := .Values.plugins }}
{{- if and (kindIs "map" $manifest) (kindIs "map" $manifest.grants) }}
{{- if hasKey $manifest.grants "pod_logs" }}
{{- $podLogs = true }}
{{- end }}
{{- end }}
{{- end }}
{{- $podLogs }}
{{- end }}

{{/*
"true" when the state volume lives and dies with the pod: no claim (persistence.enabled
false) and stateVolume an emptyDir, a generic ephemeral volume, or empty (which Kubernetes
makes an emptyDir).
*/}}
{{- define "jobrelay.ephemeralState" -}}
{{- if .Values.persistence.enabled -}}
false
{{- else if or (not .Values.stateVolume) (hasKey .Values.stateVolume "emptyDir") (hasKey .Values.stateVolume "ephemeral") -}}
true
{{- else -}}
false
{{- end -}}
{{- end }}

{{/*
Values that render but would not work, refused with the setting named (Helm's `fail`):
  - leader or sharded mode without a state store the replicas share (stateUrl, or
    config.state.url): each replica would keep its own cursors and a fail-over would deliver
    everything again; the daemon refuses it too;
  - more than one replica in single mode: each would deliver everything;
  - more than one replica on one state claim: a ReadWriteOnce claim mounts on one node only,
    and two daemons would share one SQLite folder;
  - a state volume that dies with the pod, unless acknowledgeEphemeralState says so;
  - stateUrl together with config.state: the chart writes `state` from stateUrl only when
    config.state is absent, so one of the two would be ignored;
  - a config.telemetry the probes cannot reach: without `listen` (no endpoint), on a port
    other than metricsPort (which the probes, the Service and the NetworkPolicy use), or on a
    loopback address (the kubelet probes the pod's IP).
*/}}
{{- define "jobrelay.validate" -}}
{{- if and (hasKey .Values.config "state") .Values.stateUrl }}
{{- fail (printf "stateUrl and config.state: give the state store once, as stateUrl (the chart writes state.url from it) or as config.state (`path` or `url`), not both; with both, stateUrl %q would be ignored" .Values.stateUrl) }}
{{- end }}
{{- if hasKey .Values.config "telemetry" }}
{{- $listen := "" }}
{{- if kindIs "map" .Values.config.telemetry }}
{{- $listen = .Values.config.telemetry.listen | default "" | toString }}
{{- end }}
{{- if not $listen }}
{{- fail (printf "config.telemetry: without `listen` jobrelay serves no /healthz, /readyz or /metrics, and the pod's probes fail; leave config.telemetry out (the chart listens on 0.0.0.0:%d, metricsPort) or set config.telemetry.listen to \"0.0.0.0:%d\"" (int .Values.metricsPort) (int .Values.metricsPort)) }}
{{- end }}
{{- $port := regexFind ":[0-9]+$" $listen | trimPrefix ":" }}
{{- $host := trimSuffix (printf ":%s" $port) $listen }}
{{- if or (not $port) (not $host) }}
{{- fail (printf "config.telemetry.listen: `%s` is not an address and a port (e.g. 0.0.0.0:%d)" $listen (int .Values.metricsPort)) }}
{{- end }}
{{- if ne (atoi $port) (int .Values.metricsPort) }}
{{- fail (printf "config.telemetry.listen: port %s is not metricsPort (%d), which the pod's probes, the Service and the NetworkPolicy use; set metricsPort: %s, or leave config.telemetry out" $port (int .Values.metricsPort) $port) }}
{{- end }}
{{- if or (hasPrefix "127." $host) (eq $host "[::1]") (hasPrefix "[::ffff:127." $host) }}
{{- fail (printf "config.telemetry.listen: `%s` is a loopback address, which the kubelet's probes and Prometheus cannot reach (they come to the pod's IP); listen on 0.0.0.0:%s (or [::]:%s)" $listen $port $port) }}
{{- end }}
{{- end }}
{{- $mode := .Values.coordination.mode }}
{{- if and (hasKey .Values.config "coordination") (kindIs "map" .Values.config.coordination) }}
{{- $mode = .Values.config.coordination.mode | default "single" }}
{{- end }}
{{- $shared := false }}
{{- if hasKey .Values.config "state" }}
{{- if and (kindIs "map" .Values.config.state) (hasKey .Values.config.state "url") }}
{{- $shared = true }}
{{- end }}
{{- else if .Values.stateUrl }}
{{- $shared = true }}
{{- end }}
{{- if and (ne $mode "single") (not $shared) }}
{{- fail (printf "coordination.mode: `%s` needs a state store every replica shares: set stateUrl (e.g. env:JOBRELAY_STATE_URL, the URL of a MySQL/MariaDB database in a Secret listed in envFromSecrets); a SQLite file on the state volume is one replica's own" $mode) }}
{{- end }}
{{- $replicas := int .Values.replicas }}
{{- if and (gt $replicas 1) (eq $mode "single") }}
{{- fail (printf "replicas: %d replicas in coordination.mode `single` would each deliver every event; set coordination.mode to leader or sharded (with stateUrl), or replicas to 1" $replicas) }}
{{- end }}
{{- if gt $replicas 1 }}
{{- if .Values.persistence.enabled }}
{{- fail (printf "persistence.enabled: one ReadWriteOnce claim cannot serve %d replicas; set persistence.enabled=false and give each pod its own state volume (stateVolume, e.g. emptyDir with acknowledgeEphemeralState=true: the cursors are in stateUrl's database)" $replicas) }}
{{- end }}
{{- if hasKey .Values.stateVolume "persistentVolumeClaim" }}
{{- fail (printf "stateVolume: one claim would be shared by %d replicas, each with its own SQLite databases on it; give each pod its own state volume (emptyDir with acknowledgeEphemeralState=true, or an ephemeral volume)" $replicas) }}
{{- end }}
{{- end }}
{{- if and (eq (include "jobrelay.ephemeralState" .) "true") (not .Values.acknowledgeEphemeralState) }}
{{- if $shared }}
{{- fail "stateVolume: the state volume dies with the pod, and with it the plugins' embedded SQL databases, the compile cache and a local archive; set persistence.enabled=true (one replica), or acknowledgeEphemeralState=true to accept it" }}
{{- else }}
{{- fail "stateVolume: the state volume dies with the pod, and with it the cursors: every new pod would deliver the current state of every job again; set persistence.enabled=true, or acknowledgeEphemeralState=true to accept it" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The main file, jobrelay.yaml, as the ConfigMap holds it: `config` as written, then the chart's
own settings for only the keys `config` leaves out, so every key of the main file can be set
from values without writing it twice.
*/}}
{{- define "jobrelay.mainFile" -}}
{{ toYaml .Values.config }}
{{- if not (hasKey .Values.config "plugin_dir") }}
plugin_dir: /opt/jobrelay/plugins
{{- end }}
{{- if not (hasKey .Values.config "plugin_manifests_dir") }}
plugin_manifests_dir: /etc/jobrelay-plugins
{{- end }}
{{- if not (hasKey .Values.config "clusters_dir") }}
{{- if .Values.clusters.secretName }}
clusters_dir: /etc/jobrelay-clusters
{{- end }}
{{- end }}
{{- if not (hasKey .Values.config "state") }}
{{- if .Values.stateUrl }}
state: {url: {{ quote .Values.stateUrl }}}
{{- else }}
state: {path: /var/lib/jobrelay/state/jobrelay.db}
{{- end }}
{{- end }}
{{- if not (hasKey .Values.config "home_cluster") }}
{{- if .Values.homeCluster.name }}
home_cluster: {name: {{ .Values.homeCluster.name }}}
{{- end }}
{{- end }}
{{- if not (hasKey .Values.config "coordination") }}
{{- if ne .Values.coordination.mode "single" }}
coordination:
  mode: {{ .Values.coordination.mode }}
  lease_name: {{ .Release.Name }}
  lease_duration_seconds: {{ .Values.coordination.leaseDurationSeconds }}
  renew_deadline_seconds: {{ .Values.coordination.renewDeadlineSeconds }}
  retry_period_seconds: {{ .Values.coordination.retryPeriodSeconds }}
{{- end }}
{{- end }}
{{- if not (hasKey .Values.config "runtime") }}
# Compiled components kept on the state volume: a restart does not compile them again.
runtime: {cache_dir: /var/lib/jobrelay/cache}
{{- end }}
{{- if not (hasKey .Values.config "archive") }}
archive: {local: /var/lib/jobrelay/archive}
{{- end }}
{{- if not (hasKey .Values.config "telemetry") }}
telemetry: {listen: "0.0.0.0:{{ .Values.metricsPort }}"}
{{- end }}
{{- end }}

{{/*
The checksum of the main file's sections the daemon reads once at start (docs/config.md):
`runtime`, `state`, `coordination`, `sql`, `archive`, `telemetry`, `oci`, `event_memory_mb`,
`clusters_dir` and `plugin_manifests_dir`, as the rendered main file has them. The pod
template carries it, so a `helm upgrade` that changes one of them rolls the pod (the running
daemon would only note it as restart_pending), while every other edit of the main file stays a
live reload of the same pod.
*/}}
{{- define "jobrelay.readOnceChecksum" -}}
{{- $main := include "jobrelay.mainFile" . | fromYaml }}
{{- pick $main "runtime" "state" "coordination" "sql" "archive" "telemetry" "oci" "event_memory_mb" "clusters_dir" "plugin_manifests_dir" | toJson | sha256sum }}
{{- end }}
