{{/* Written by hand; every other template is generated from config/ by hack/generate-chart.ts. */}}

{{/* The labels the chart adds beside config/'s own (which are the selectors, and stay as config/ has them). */}}
{{- define "sandbox-remediator.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "sandbox-remediator.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}
{{- end }}

{{/* The agent's namespace: agent.namespace, or the release's. */}}
{{- define "sandbox-remediator.agentNamespace" -}}
{{ .Values.agent.namespace | default .Release.Namespace }}
{{- end }}
