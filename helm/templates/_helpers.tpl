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
The worker Deployments, as a JSON list: one per entry of .Values.models, each entry's fields
over the worker.* defaults; with no models, one from worker.model (named <prefix>-worker, as
before models existed). Fields: id (the name suffix, "" or "-<name>"), name (model.name, ""
for the directory's), servedNames, path, volume {claimName, hostPath, image}, gpus, replicas,
autoscaling, nodeSelector, tolerations, resources, config (merged over worker.config).
*/}}
{{- define "llm.workerModels" -}}
{{- $w := .Values.worker -}}
{{- $defaults := dict
  "id" "" "name" "" "servedNames" (list) "path" $w.model.path
  "volume" (dict "claimName" $w.model.claimName "hostPath" $w.model.hostPath "image" $w.model.image)
  "gpus" (ternary $w.gpus 0 .Values.gpu.enabled) "replicas" $w.replicas
  "autoscaling" $w.autoscaling "nodeSelector" $w.nodeSelector "tolerations" $w.tolerations
  "resources" $w.resources "config" $w.config -}}
{{- $out := list -}}
{{- if not .Values.models -}}
{{- $out = append $out $defaults -}}
{{- else -}}
{{- range $m := .Values.models -}}
{{- $e := deepCopy $defaults -}}
{{- $_ := set $e "id" (printf "-%s" $m.name) -}}
{{- $_ := set $e "name" $m.name -}}
{{- $_ := set $e "servedNames" (default (list) $m.servedNames) -}}
{{- $_ := set $e "path" $m.path -}}
{{- if $m.volume -}}
{{- $_ := set $e "volume" (merge (deepCopy $m.volume) (dict "claimName" "" "hostPath" "" "image" "")) -}}
{{- end -}}
{{- if and $.Values.gpu.enabled (hasKey $m "gpus") -}}
{{- $_ := set $e "gpus" $m.gpus -}}
{{- end -}}
{{- range $k := list "replicas" "nodeSelector" "tolerations" "resources" -}}
{{- if hasKey $m $k -}}
{{- $_ := set $e $k (index $m $k) -}}
{{- end -}}
{{- end -}}
{{- $_ := set $e "autoscaling" (mergeOverwrite (deepCopy $w.autoscaling) (default (dict) $m.autoscaling)) -}}
{{- $_ := set $e "config" (mergeOverwrite (deepCopy $w.config) (default (dict) $m.config)) -}}
{{- $out = append $out $e -}}
{{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/*
The pod selector of one worker Deployment (dict "root" $ "m" <an llm.workerModels entry>):
with models, each Deployment's pods also carry llm-serving/model, so selectors never overlap.
*/}}
{{- define "llm.modelSelector" -}}
{{ include "llm.workerSelector" .root }}
{{- if .m.id }}
llm-serving/model: {{ .m.name }}
{{- end -}}
{{- end -}}

{{/*
llm-worker configuration file of one worker Deployment (dict "root" $ "m" <an
llm.workerModels entry>): what the chart manages, with its config merged over it.
*/}}
{{- define "llm.workerConfig" -}}
{{- $root := .root -}}
{{- $model := dict "path" .m.path -}}
{{- if .m.name -}}
{{- $_ := set $model "name" .m.name -}}
{{- end -}}
{{- if .m.servedNames -}}
{{- $_ := set $model "served_names" (join "," .m.servedNames) -}}
{{- end -}}
{{- $managed := dict
  "model" $model
  "server" (dict
    "listen" "0.0.0.0:50051"
    "metrics_listen" "0.0.0.0:9090"
    "health_listen" "0.0.0.0:50052"
    "drain_grace_seconds" $root.Values.worker.drainGraceSeconds)
  "engine" (dict
    "backend" (ternary "cuda" "cpu" $root.Values.gpu.enabled)
    "watchdog_seconds" $root.Values.worker.watchdogSeconds) -}}
{{- if $root.Values.tls.enabled -}}
{{- $_ := set $managed "tls" (dict
    "cert_file" "/etc/llm/tls/tls.crt"
    "key_file" "/etc/llm/tls/tls.key"
    "client_ca_file" "/etc/llm/tls/ca.crt") -}}
{{- end -}}
{{- toYaml (mergeOverwrite $managed (deepCopy .m.config)) -}}
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
