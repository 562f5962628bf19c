{{/*
Prefix of every resource name: fullnameOverride, or the release name.
*/}}
{{- define "llm.fullname" -}}
{{- default .Release.Name .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{/*
Labels on every object. app.kubernetes.io/name (set per object) becomes the Prometheus job
through the ServiceMonitors' jobLabel, so it stays llm-worker / llm-router whatever the release.
*/}}
{{- define "llm.labels" -}}
app.kubernetes.io/part-of: llm-serving
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "llm.workerSelector" -}}
app.kubernetes.io/name: llm-worker
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "llm.routerSelector" -}}
app.kubernetes.io/name: llm-router
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/*
The headless Service's DNS name: how routers find workers, and (with TLS) the name checked in
the workers' certificate.
*/}}
{{- define "llm.workerHost" -}}
{{ include "llm.fullname" . }}-worker-headless.{{ .Release.Namespace }}.svc.cluster.local
{{- end -}}

{{/*
llm-worker configuration file: what the chart manages, with worker.config merged over it.
*/}}
{{- define "llm.workerConfig" -}}
{{- $managed := dict
  "model" (dict "path" .Values.worker.model.path)
  "server" (dict
    "listen" "0.0.0.0:50051"
    "metrics_listen" "0.0.0.0:9090"
    "health_listen" "0.0.0.0:50052"
    "drain_grace_seconds" .Values.worker.drainGraceSeconds)
  "engine" (dict
    "backend" (ternary "cuda" "cpu" .Values.gpu.enabled)
    "watchdog_seconds" .Values.worker.watchdogSeconds) -}}
{{- if .Values.tls.enabled -}}
{{- $_ := set $managed "tls" (dict
    "cert_file" "/etc/llm/tls/tls.crt"
    "key_file" "/etc/llm/tls/tls.key"
    "client_ca_file" "/etc/llm/tls/ca.crt") -}}
{{- end -}}
{{- toYaml (mergeOverwrite $managed (deepCopy .Values.worker.config)) -}}
{{- end -}}

{{/*
llm-router configuration file: what the chart manages, with router.config merged over it.
*/}}
{{- define "llm.routerConfig" -}}
{{- $managed := dict
  "router" (dict
    "listen" "0.0.0.0:50050"
    "metrics_listen" "0.0.0.0:9091"
    "health_listen" "0.0.0.0:50052"
    "drain_grace_seconds" .Values.router.drainGraceSeconds)
  "discovery" (dict
    "dns" (printf "%s:50051" (include "llm.workerHost" .))
    "dns_refresh_ms" 5000) -}}
{{- if .Values.tls.enabled -}}
{{- $tls := dict "cert_file" "/etc/llm/tls/tls.crt" "key_file" "/etc/llm/tls/tls.key" -}}
{{- if .Values.tls.requireClientCertificates -}}
{{- $_ := set $tls "client_ca_file" "/etc/llm/tls/ca.crt" -}}
{{- end -}}
{{- $_ := set $managed "tls" $tls -}}
{{- $_ := set $managed "upstream_tls" (dict
    "ca_file" "/etc/llm/tls/ca.crt"
    "cert_file" "/etc/llm/tls/tls.crt"
    "key_file" "/etc/llm/tls/tls.key"
    "server_name" (default (include "llm.workerHost" .) .Values.tls.workerServerName)) -}}
{{- end -}}
{{- if .Values.auth.tokenSecretName -}}
{{- $_ := set $managed "auth" (dict "token_file" "/etc/llm/auth/token") -}}
{{- end -}}
{{- toYaml (mergeOverwrite $managed (deepCopy .Values.router.config)) -}}
{{- end -}}

{{/*
Projected sources of the TLS Secret (files under /etc/llm/tls).
*/}}
{{- define "llm.tlsSource" -}}
- secret:
    name: {{ .Values.tls.secretName }}
    items:
      - key: tls.crt
        path: tls/tls.crt
      - key: tls.key
        path: tls/tls.key
      - key: ca.crt
        path: tls/ca.crt
{{- end -}}

{{/*
Container security context of both processes.
*/}}
{{- define "llm.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end -}}
