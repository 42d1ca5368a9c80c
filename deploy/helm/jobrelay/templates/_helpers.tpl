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
selector cannot.
*/}}
{{- define "jobrelay.selectorLabels" -}}
app.kubernetes.io/name: jobrelay
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}
