{{/*
Names, labels and small computed values shared by every template.
*/}}

{{- define "nvlfleet.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* <release>-<chart>, or just <release> when the release name already contains the chart name. */}}
{{- define "nvlfleet.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "nvlfleet.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "nvlfleet.selectorLabels" -}}
app.kubernetes.io/name: {{ include "nvlfleet.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "nvlfleet.labels" -}}
helm.sh/chart: {{ include "nvlfleet.chart" . }}
{{ include "nvlfleet.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: nvlfleet
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "nvlfleet.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "nvlfleet.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* repository:tag, or repository@digest when a digest is pinned. */}}
{{- define "nvlfleet.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{- define "nvlfleet.metricsServiceName" -}}
{{- printf "%s-metrics" (include "nvlfleet.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "nvlfleet.webhookServiceName" -}}
{{- printf "%s-webhook" (include "nvlfleet.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "nvlfleet.webhookSecretName" -}}
{{- printf "%s-webhook-tls" (include "nvlfleet.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "nvlfleet.leaseName" -}}
{{- printf "%s-leader" (include "nvlfleet.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The webhook's CA and serving certificate (base64 PEM) as YAML: caCert, cert, key.
Generated with Helm's genCA/genSignedCert on first install and reused from the existing Secret afterwards
(lookup), so upgrades keep the CA the API server trusts. The result is memoised in .Values so the Secret, the
webhook's caBundle and the Deployment's checksum annotation (three templates) see the same certificate.
Under `helm template` there is no cluster to look up, so every run generates a fresh one.
*/}}
{{- define "nvlfleet.webhookTLS" -}}
{{- if not (hasKey .Values.webhook "__tls") }}
{{- $secretName := include "nvlfleet.webhookSecretName" . }}
{{- $existing := lookup "v1" "Secret" .Release.Namespace $secretName }}
{{- $tls := dict }}
{{- if and $existing (hasKey (default dict $existing.data) "ca.crt") (hasKey $existing.data "tls.crt") (hasKey $existing.data "tls.key") }}
{{- $tls = dict "caCert" (index $existing.data "ca.crt") "cert" (index $existing.data "tls.crt") "key" (index $existing.data "tls.key") }}
{{- else }}
{{- $service := include "nvlfleet.webhookServiceName" . }}
{{- $days := int .Values.webhook.certificate.validityDays }}
{{- $ca := genCA (printf "%s-webhook-ca" (include "nvlfleet.fullname" .)) $days }}
{{- $dnsNames := list $service (printf "%s.%s" $service .Release.Namespace) (printf "%s.%s.svc" $service .Release.Namespace) (printf "%s.%s.svc.cluster.local" $service .Release.Namespace) }}
{{- $cert := genSignedCert (printf "%s.%s.svc" $service .Release.Namespace) nil $dnsNames $days $ca }}
{{- $tls = dict "caCert" ($ca.Cert | b64enc) "cert" ($cert.Cert | b64enc) "key" ($cert.Key | b64enc) }}
{{- end }}
{{- $_ := set .Values.webhook "__tls" $tls }}
{{- end }}
{{- toYaml (get .Values.webhook "__tls") }}
{{- end }}

{{/* The validating handler's URL path: kopf serves each admission handler at /<handler id>. A unit test checks
it against nvlfleet.adapters.webhook.WEBHOOK_ID, the id it is registered under. */}}
{{- define "nvlfleet.webhookPath" -}}
/validate-deepseekserving
{{- end }}

{{/* The `nvlfleet run` flag of each `policy` value (nvlfleet.api.policy.FLAGS; a unit test checks they agree). */}}
{{- define "nvlfleet.policyFlags" -}}
weightsHostPathPrefixes: --allow-weights-host-path
volumeHostPathPrefixes: --allow-volume-host-path
serviceAccounts: --allow-service-account
priorityClasses: --allow-priority-class
{{- end }}
