{{/* Names and labels shared by every object. */}}

{{- define "sluice.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "sluice.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "sluice.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sluice.name" . | quote }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/component: controller
{{- end -}}

{{- define "sluice.labels" -}}
{{ include "sluice.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | quote }}
{{- end -}}

{{- define "sluice.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "sluice.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "sluice.electionID" -}}
{{- default (printf "%s-leader" (include "sluice.fullname" .)) .Values.controller.electionID -}}
{{- end -}}

{{/* REGISTRY/IMAGE:TAG@DIGEST, the tag defaulting to the chart's appVersion. */}}
{{- define "sluice.image" -}}
{{- $i := .Values.controller.image -}}
{{- $repo := $i.image -}}
{{- if $i.registry -}}{{- $repo = printf "%s/%s" $i.registry $i.image -}}{{- end -}}
{{- $ref := printf "%s:%s" $repo (default .Chart.AppVersion $i.tag | toString) -}}
{{- if $i.digest -}}{{- $ref = printf "%s@%s" $ref $i.digest -}}{{- end -}}
{{- $ref -}}
{{- end -}}

{{- define "sluice.metricsService" -}}
{{- if or .Values.controller.metrics.enabled .Values.controller.metrics.serviceMonitor.enabled -}}true{{- end -}}
{{- end -}}

{{- define "sluice.admissionName" -}}
{{- printf "%s-admission" (include "sluice.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "sluice.admissionSecret" -}}
{{- default (include "sluice.admissionName" .) .Values.controller.admissionWebhooks.secretName -}}
{{- end -}}
