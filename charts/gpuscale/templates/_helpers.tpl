{{/* Names and labels shared by every object of the chart. */}}

{{- define "gpuscale.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's object name: the release name, unless it lacks the chart's name (then "<release>-gpuscale"). */}}
{{- define "gpuscale.fullname" -}}
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

{{- define "gpuscale.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpuscale.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: controller
{{- end -}}

{{- define "gpuscale.labels" -}}
{{ include "gpuscale.selectorLabels" . }}
app.kubernetes.io/part-of: gpuscale
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "gpuscale.serviceAccountName" -}}
{{- if .Values.rbac.serviceAccount.create -}}
{{- default (include "gpuscale.fullname" .) .Values.rbac.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.rbac.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The leader Lease and the status ConfigMap: named in the args and, by name, in the Role. */}}
{{- define "gpuscale.leaseName" -}}{{ include "gpuscale.fullname" . }}{{- end -}}
{{- define "gpuscale.statusName" -}}{{ include "gpuscale.fullname" . }}-status{{- end -}}

{{- define "gpuscale.cloudProvider" -}}
{{- if not (has .Values.cloudProvider (list "kwok" "clusterapi")) -}}
{{- fail (printf "cloudProvider: expected kwok or clusterapi, got %q" (toString .Values.cloudProvider)) -}}
{{- end -}}
{{- .Values.cloudProvider -}}
{{- end -}}

{{/* CA's --node-group-auto-discovery=clusterapi:namespace=…,clusterName=…,label=value, from autoDiscovery. */}}
{{- define "gpuscale.capiAutoDiscovery" -}}
{{- $parts := list -}}
{{- with .Values.autoDiscovery.namespace }}{{ $parts = append $parts (printf "namespace=%s" .) }}{{ end -}}
{{- with .Values.autoDiscovery.clusterName }}{{ $parts = append $parts (printf "clusterName=%s" .) }}{{ end -}}
{{- range $label := .Values.autoDiscovery.labels -}}
{{- range $key, $value := $label }}{{ $parts = append $parts (printf "%s=%s" $key $value) }}{{ end -}}
{{- end -}}
{{- join "," $parts -}}
{{- end -}}
