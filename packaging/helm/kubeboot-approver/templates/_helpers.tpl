{{/*
Labels of every object: kubeboot's own (as in packaging/manifests) and Helm's.
Selectors use app.kubernetes.io/name alone, as the kustomize base does, so a
Deployment applied with kubectl can be taken over by the chart.
*/}}
{{- define "kubeboot-approver.labels" -}}
app.kubernetes.io/part-of: kubeboot
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{- define "kubeboot-approver.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}
