{{- define "remote.labels" -}}
app.kubernetes.io/name: jobrelay-remote
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end }}

{{- define "remote.serviceAccountName" -}}
{{ .Values.serviceAccount.name | default .Release.Name }}
{{- end }}

{{/*
The built-in job kinds by name: their API group and resource (as host/watch/src/kinds.rs has
them; tests/e2e/chart.rs checks the two agree).
*/}}
{{- define "remote.builtinKinds" -}}
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
What jobrelay calls on a watched cluster: list and watch each kind's resource, get and patch
those it holds with its finalizer (every kind with jobWrites), delete those of cleanupKinds
(each must be a name of kinds), and with podLogs list pods and get their logs. The same rules
the jobrelay chart gives it on its home cluster.
*/}}
{{- define "remote.rules" -}}
{{- $builtins := include "remote.builtinKinds" . | fromYaml }}
{{- $names := list }}
{{- range .Values.kinds }}
{{- $names = append $names .name }}
{{- end }}
{{- range $i, $name := .Values.cleanupKinds }}
{{- if not (has $name $names) }}
{{- fail (printf "cleanupKinds[%d]: `%s` is not a name of kinds (%s); clean-up deletes only watched kinds" $i $name (join ", " $names)) }}
{{- end }}
{{- end }}
{{- $resources := dict }}
{{- $deletes := dict }}
{{- $kueue := false }}
{{- $podWatch := false }}
{{- range $i, $kind := .Values.kinds }}
{{- $group := "" }}
{{- $plural := "" }}
{{- if hasKey $kind "group" }}
{{- $group = $kind.group }}
{{- $plural = required (printf "kinds[%d] (%s): a custom kind needs `plural`" $i $kind.name) $kind.plural }}
{{- else if hasKey $builtins $kind.name }}
{{- $builtin := get $builtins $kind.name }}
{{- $group = $builtin.group }}
{{- $plural = $builtin.plural }}
{{- else }}
{{- fail (printf "kinds[%d]: `%s` is not a built-in kind (%s); a custom kind gives group and plural" $i $kind.name (keys $builtins | sortAlpha | join ", ")) }}
{{- end }}
{{- $key := printf "%s/%s" $group $plural }}
{{- $_ := set $resources $key (or (get $resources $key | default false) ($kind.finalizer | default false) ($.Values.jobWrites | default false)) }}
{{- $_ := set $deletes $key (or (get $deletes $key | default false) (has $kind.name ($.Values.cleanupKinds | default list))) }}
{{- if and (kindIs "map" $kind.story) $kind.story.kueue }}
{{- $kueue = true }}
{{- end }}
{{- if and (kindIs "map" $kind.story) $kind.story.pods }}
{{- $podWatch = true }}
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
{{- if .Values.podLogs }}
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
