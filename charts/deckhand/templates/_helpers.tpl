{{- define "deckhand.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "deckhand.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else if contains (include "deckhand.name" .) .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name (include "deckhand.name" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "deckhand.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "deckhand.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: deckhand
{{- end }}

{{- define "deckhand.selectorLabels" -}}
app.kubernetes.io/name: {{ include "deckhand.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "deckhand.operatorLabels" -}}
{{ include "deckhand.labels" . }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "deckhand.operatorSelectorLabels" -}}
{{ include "deckhand.selectorLabels" . }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "deckhand.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "deckhand.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "deckhand.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/*
Values keys of the enabled controllers, sorted; fails on a controller this
version of the operator does not have.
*/}}
{{- define "deckhand.enabledControllers" -}}
{{- $known := include "deckhand.knownControllers" . | fromYaml }}
{{- $enabled := list }}
{{- range $key, $c := .Values.controllers }}
{{- if $c.enabled }}
{{- if not (hasKey $known $key) }}
{{- fail (printf "controllers.%s.enabled: this version of deckhand does not have the %s controller yet; known: %s" $key $key (keys $known | sortAlpha | join ", ")) }}
{{- end }}
{{- $enabled = append $enabled $key }}
{{- end }}
{{- end }}
{{- $enabled | sortAlpha | toJson }}
{{- end }}

{{/* The --controllers value: names of the enabled controllers. */}}
{{- define "deckhand.controllersFlag" -}}
{{- $known := include "deckhand.knownControllers" . | fromYaml }}
{{- $names := list }}
{{- range (include "deckhand.enabledControllers" . | fromJsonArray) }}
{{- $names = append $names (get $known .) }}
{{- end }}
{{- $names | join "," }}
{{- end }}

{{/* (list $ "blogPost"): whether that controller's CRD is installed. */}}
{{- define "deckhand.crdEnabled" -}}
{{- $ctx := index . 0 }}
{{- $key := index . 1 }}
{{- if and $ctx.Values.crds.enabled (or $ctx.Values.crds.installAll (index $ctx.Values.controllers $key).enabled) }}true{{- end }}
{{- end }}

{{/* RBAC rules of every enabled controller (but a jmxExporter limited to
its own namespaces, which gets Roles there: see rbac-jmxexporter.yaml). */}}
{{- define "deckhand.controllerRules" -}}
{{- range (include "deckhand.enabledControllers" . | fromJsonArray) }}
{{- if not (and (eq . "jmxExporter") $.Values.controllers.jmxExporter.namespaces) }}
{{ include (printf "deckhand.rules.%s" .) $ | trim }}
{{- end }}
{{- end }}
{{- end }}

{{/* The operator's config file, read through viper (keys are flag names). */}}
{{- define "deckhand.config" -}}
{{- $cfg := dict
  "leader-elect" .Values.leaderElection.enabled
  "leader-election-id" (printf "%s.deckhand.dev" (include "deckhand.fullname" .))
  "metrics-bind-address" (ternary (printf ":%d" (int .Values.metrics.port)) "0" .Values.metrics.enabled)
  "health-probe-bind-address" (printf ":%d" (int .Values.healthProbe.port))
  "log-level" .Values.logLevel
  "log-format" .Values.logFormat
}}
{{- with .Values.watchNamespaces }}
{{- $_ := set $cfg "watch-namespaces" . }}
{{- end }}
{{- if not .Values.controllers.configMonitor.secrets }}
{{- $_ := set $cfg "configmonitor-ignore-secrets" true }}
{{- end }}
{{- with .Values.controllers.jmxExporter }}
{{- if .enabled }}
{{- $_ := set $cfg "jmxexporter-agent-jar" .agentJar }}
{{- with .namespaces }}
{{- $_ := set $cfg "jmxexporter-namespaces" . }}
{{- end }}
{{- end }}
{{- end }}
{{- mergeOverwrite $cfg .Values.config | toYaml }}
{{- end }}

{{/* Chart-level checks with messages a person can act on. */}}
{{- define "deckhand.validate" -}}
{{- if eq (include "deckhand.enabledControllers" . | fromJsonArray | len) 0 }}
{{- fail "controllers: enable at least one controller (for example --set controllers.blogPost.enabled=true)" }}
{{- end }}
{{- if and (gt (int .Values.replicaCount) 1) (not .Values.leaderElection.enabled) }}
{{- fail "replicaCount > 1 needs leaderElection.enabled=true, or the replicas would reconcile the same objects at once" }}
{{- end }}
{{- if and .Values.rbac.namespaced (not .Values.watchNamespaces) }}
{{- fail "rbac.namespaced=true needs watchNamespaces: the Roles are created in those namespaces" }}
{{- end }}
{{- end }}
