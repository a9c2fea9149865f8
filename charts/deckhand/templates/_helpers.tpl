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

{{/* The operator's ServiceAccount: serviceAccount.name, else the release's
full name, whether the chart creates it or not. Never the namespace's
"default" account, which every pod naming no account runs as. */}}
{{- define "deckhand.serviceAccountName" -}}
{{- default (include "deckhand.fullname" .) .Values.serviceAccount.name }}
{{- end }}

{{/* Name of an object outside the release namespace (ClusterRole,
ClusterRoleBinding, the Roles in watchNamespaces): the release namespace
and full name, so the same release name in two namespaces does not collide.
At most 63 characters; a longer name is cut and ends in a hash of the whole. */}}
{{- define "deckhand.globalName" -}}
{{- include "deckhand.globalNameWithSuffix" (list . "") }}
{{- end }}

{{/* (list $ "jmxexporter"): deckhand.globalName ending in -jmxexporter. */}}
{{- define "deckhand.globalNameWithSuffix" -}}
{{- $ctx := index . 0 }}
{{- $name := printf "%s-%s" $ctx.Release.Namespace (include "deckhand.fullname" $ctx) }}
{{- with index . 1 }}{{ $name = printf "%s-%s" $name . }}{{ end }}
{{- if gt (len $name) 63 }}
{{- $name = printf "%s-%s" ($name | trunc 54 | trimSuffix "-") ($name | sha256sum | trunc 8) }}
{{- end }}
{{- $name }}
{{- end }}

{{/* (list $ "metrics"): the full name ending in -metrics, at most 63
characters (a Service name is a DNS label): when the full name is too long
for the suffix, it is cut and a hash of the whole keeps names distinct. */}}
{{- define "deckhand.fullnameWithSuffix" -}}
{{- $ctx := index . 0 }}
{{- $suffix := index . 1 }}
{{- $full := include "deckhand.fullname" $ctx }}
{{- $name := printf "%s-%s" $full $suffix }}
{{- if gt (len $name) 63 }}
{{- $name = printf "%s-%s-%s" ($full | trunc (int (sub 53 (len $suffix))) | trimSuffix "-") ($full | sha256sum | trunc 8) $suffix }}
{{- end }}
{{- $name }}
{{- end }}

{{- define "deckhand.metricsServiceName" -}}
{{- include "deckhand.fullnameWithSuffix" (list . "metrics") }}
{{- end }}

{{/* Labels of the operator's pods: the chart's, then podLabels. podLabels
may not set a selector label (validated in deckhand.validate). */}}
{{- define "deckhand.podLabels" -}}
{{- $labels := include "deckhand.operatorLabels" . | fromYaml }}
{{- mergeOverwrite $labels .Values.podLabels | toYaml }}
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
its own namespaces, which gets Roles there: see rbac-jmxexporter.yaml), as
a YAML list with each rule once: several controllers need the same rule
(Events), which a role should not repeat. */}}
{{- define "deckhand.controllerRules" -}}
{{- $text := "" }}
{{- range (include "deckhand.enabledControllers" . | fromJsonArray) }}
{{- if not (and (eq . "jmxExporter") $.Values.controllers.jmxExporter.namespaces) }}
{{- $text = printf "%s\n%s" $text (include (printf "deckhand.rules.%s" .) $ | trim) }}
{{- end }}
{{- end }}
{{- $text | fromYamlArray | uniq | toYaml }}
{{- end }}

{{/* The operator's config file, read through viper (keys are flag names). */}}
{{- define "deckhand.config" -}}
{{- $cfg := dict
  "leader-elect" .Values.leaderElection.enabled
  "leader-election-id" (printf "%s.deckhand.dev" (include "deckhand.fullname" .))
  "leader-election-lease-duration" .Values.leaderElection.leaseDuration
  "leader-election-renew-deadline" .Values.leaderElection.renewDeadline
  "leader-election-retry-period" .Values.leaderElection.retryPeriod
  "metrics-bind-address" (ternary (printf ":%d" (int .Values.metrics.port)) "0" .Values.metrics.enabled)
  "health-probe-bind-address" (printf ":%d" (int .Values.healthProbe.port))
  "log-level" .Values.logLevel
  "log-format" .Values.logFormat
}}
{{- with .Values.watchNamespaces }}
{{- $_ := set $cfg "watch-namespaces" . }}
{{- end }}
{{- with .Values.excludeNamespaces }}
{{- $_ := set $cfg "exclude-namespaces" . }}
{{- end }}
{{- if not .Values.controllers.configMonitor.secrets }}
{{- $_ := set $cfg "configmonitor-ignore-secrets" true }}
{{- end }}
{{- /* Only an explicit false: helm upgrade --reuse-values from a chart
without the value leaves it unset, which keeps the operator's default. */}}
{{- if and .Values.controllers.database.enabled (eq (toString .Values.controllers.database.failoverByDefault) "false") }}
{{- $_ := set $cfg "database-failover-default" false }}
{{- end }}
{{- if and .Values.controllers.database.enabled (eq (toString .Values.controllers.database.tlsByDefault) "false") }}
{{- $_ := set $cfg "database-tls-default" false }}
{{- end }}
{{- if and .Values.controllers.database.enabled (eq (toString .Values.controllers.database.monitoringByDefault) "false") }}
{{- $_ := set $cfg "database-monitoring-default" false }}
{{- end }}
{{- if and .Values.controllers.mysqlCluster.enabled (eq (toString .Values.controllers.mysqlCluster.tlsByDefault) "false") }}
{{- $_ := set $cfg "mysqlcluster-tls-default" false }}
{{- end }}
{{- if and .Values.controllers.database.enabled .Values.controllers.database.archiverImage }}
{{- $_ := set $cfg "database-archiver-image" .Values.controllers.database.archiverImage }}
{{- end }}
{{- if and .Values.controllers.database.enabled .Values.controllers.database.poolerImage }}
{{- $_ := set $cfg "database-pooler-image" .Values.controllers.database.poolerImage }}
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

{{/* Keys of `config` the chart sets from its own values: key -> the value to use. */}}
{{- define "deckhand.managedConfigKeys" -}}
controllers: controllers.<name>.enabled
watch-namespaces: watchNamespaces
exclude-namespaces: excludeNamespaces
leader-elect: leaderElection.enabled
leader-election-id: nothing (the chart names the Lease after the release)
leader-election-namespace: nothing (the Lease is in the release namespace, where the chart grants access to it)
leader-election-lease-duration: leaderElection.leaseDuration
leader-election-renew-deadline: leaderElection.renewDeadline
leader-election-retry-period: leaderElection.retryPeriod
metrics-bind-address: metrics.port and metrics.enabled
health-probe-bind-address: healthProbe.port
log-level: logLevel
log-format: logFormat
configmonitor-ignore-secrets: controllers.configMonitor.secrets
database-failover-default: controllers.database.failoverByDefault
database-tls-default: controllers.database.tlsByDefault
database-monitoring-default: controllers.database.monitoringByDefault
database-archiver-image: controllers.database.archiverImage
database-pooler-image: controllers.database.poolerImage
mysqlcluster-tls-default: controllers.mysqlCluster.tlsByDefault
jmxexporter-agent-jar: controllers.jmxExporter.agentJar
jmxexporter-namespaces: controllers.jmxExporter.namespaces
kubeconfig: nothing (the operator uses its ServiceAccount)
config: nothing (the chart mounts the config file)
{{- end }}

{{/* A Go duration ("1m30s", "1500ms") in nanoseconds, as Go's
time.ParseDuration reads it; values.schema.json has checked its form. */}}
{{- define "deckhand.nanoseconds" -}}
{{- $unit := dict "ns" 1 "us" 1000 "µs" 1000 "ms" 1000000 "s" 1000000000 "m" 60000000000 "h" 3600000000000 }}
{{- $total := 0.0 }}
{{- range regexFindAll "[0-9.]+(ns|us|µs|ms|s|m|h)" (toString .) -1 }}
{{- $n := regexFind "^[0-9.]+" . }}
{{- $total = addf $total (mulf $n (get $unit (trimPrefix $n .))) }}
{{- end }}
{{- round $total 0 | int64 }}
{{- end }}

{{/* Chart-level checks with messages a person can act on. */}}
{{- define "deckhand.validate" -}}
{{- $managed := include "deckhand.managedConfigKeys" . | fromYaml }}
{{- range $key, $_ := .Values.config }}
{{- if hasKey $managed $key }}
{{- fail (printf "config.%s is set by the chart: use %s" $key (get $managed $key)) }}
{{- end }}
{{- end }}
{{- $selector := include "deckhand.operatorSelectorLabels" . | fromYaml }}
{{- range $key, $_ := .Values.podLabels }}
{{- if hasKey $selector $key }}
{{- fail (printf "podLabels.%s: a selector label of the operator's Deployment, set by the chart; choose another key" $key) }}
{{- end }}
{{- end }}
{{- if and .Values.metrics.enabled (eq (int .Values.metrics.port) (int .Values.healthProbe.port)) }}
{{- fail (printf "metrics.port and healthProbe.port are both %d: the operator cannot listen twice on one port; change one" (int .Values.metrics.port)) }}
{{- end }}
{{- if eq (include "deckhand.enabledControllers" . | fromJsonArray | len) 0 }}
{{- fail "controllers: enable at least one controller (for example --set controllers.blogPost.enabled=true)" }}
{{- end }}
{{- if and (gt (int .Values.replicaCount) 1) (not .Values.leaderElection.enabled) }}
{{- fail "replicaCount > 1 needs leaderElection.enabled=true, or the replicas would reconcile the same objects at once" }}
{{- end }}
{{- /* The leader elector's times, checked as the operator checks them
(operator/manager/leaderelection.go) so that a bad one fails the install,
not the operator's start. */}}
{{- with .Values.leaderElection }}
{{- $lease := include "deckhand.nanoseconds" .leaseDuration | int64 }}
{{- $renew := include "deckhand.nanoseconds" .renewDeadline | int64 }}
{{- $retry := include "deckhand.nanoseconds" .retryPeriod | int64 }}
{{- if or (le $lease 0) (le $renew 0) (le $retry 0) }}
{{- fail (printf "leaderElection: leaseDuration (%s), renewDeadline (%s) and retryPeriod (%s) must be positive" .leaseDuration .renewDeadline .retryPeriod) }}
{{- end }}
{{- if ne (mod $lease 1000000000) 0 }}
{{- fail (printf "leaderElection.leaseDuration %s: must be whole seconds (the Lease stores leaseDurationSeconds)" .leaseDuration) }}
{{- end }}
{{- if le $lease $renew }}
{{- fail (printf "leaderElection.leaseDuration %s must be longer than leaderElection.renewDeadline %s: a leader that cannot renew must stop before another may take over" .leaseDuration .renewDeadline) }}
{{- end }}
{{- if le $renew (mulf 1.2 $retry | floor | int64) }}
{{- fail (printf "leaderElection.renewDeadline %s must be longer than 1.2 × leaderElection.retryPeriod %s (renewals come every retry period, 20%% later at most)" .renewDeadline .retryPeriod) }}
{{- end }}
{{- end }}
{{- if and .Values.watchNamespaces .Values.excludeNamespaces }}
{{- fail "watchNamespaces and excludeNamespaces cannot both be set: excludeNamespaces applies when every namespace is watched; leave the namespace out of watchNamespaces instead" }}
{{- end }}
{{- if and .Values.rbac.namespaced (not .Values.watchNamespaces) }}
{{- fail "rbac.namespaced=true needs watchNamespaces: the Roles are created in those namespaces" }}
{{- end }}
{{- with .Values.controllers.jmxExporter }}
{{- if and .enabled (not $.Values.rbac.namespaced) (not .namespaces) (not .allNamespaces) }}
{{- fail "controllers.jmxExporter.enabled=true would grant pods/exec in every namespace: list the namespaces of your Java apps in controllers.jmxExporter.namespaces, or set controllers.jmxExporter.allNamespaces=true" }}
{{- end }}
{{- end }}
{{- end }}

{{/* (list $ "iximiuz.com/v1alpha1" "BlogPost" "blog-post-1"): "true" when that
object exists in the release namespace. The demo's custom resources are
created once, by a hook, and never replaced: a re-created ConfigMonitor
would lose its record of the configuration it last rolled. Empty in
`helm template`, which has no cluster to ask. */}}
{{- define "deckhand.demoExists" -}}
{{- $ctx := index . 0 }}
{{- $apiVersion := index . 1 }}
{{- $kind := index . 2 }}
{{- if $ctx.Capabilities.APIVersions.Has (printf "%s/%s" $apiVersion $kind) }}
{{- if lookup $apiVersion $kind $ctx.Release.Namespace (index . 3) }}true{{ end }}
{{- end }}
{{- end }}

{{/* (list $ "tdsets.schedule.rs"), rendered where a CRD is switched off:
fails when this upgrade would make Helm delete the CRD, and with it every
object of its kind, while such objects exist. Helm deletes a CRD the
previous release installed unless the CRD in the cluster is annotated
helm.sh/resource-policy: keep (crds.keep=true when it was installed).
lookup is empty in `helm template`, which therefore never fails here. */}}
{{- define "deckhand.refuseCRDRemoval" -}}
{{- $ctx := index . 0 }}
{{- $name := index . 1 }}
{{- $crd := lookup "apiextensions.k8s.io/v1" "CustomResourceDefinition" "" $name }}
{{- if $crd }}
{{- $ann := $crd.metadata.annotations | default dict }}
{{- $ours := and (eq (get $ann "meta.helm.sh/release-name") $ctx.Release.Name) (eq (get $ann "meta.helm.sh/release-namespace") $ctx.Release.Namespace) }}
{{- if and $ours (ne (get $ann "helm.sh/resource-policy") "keep") }}
{{- $version := "" }}
{{- range $crd.spec.versions }}{{ if .storage }}{{ $version = .name }}{{ end }}{{ end }}
{{- $kind := $crd.spec.names.kind }}
{{- $objects := (lookup (printf "%s/%s" $crd.spec.group $version) $kind "" "").items | default list }}
{{- if $objects }}
{{- $some := list }}
{{- range $i, $o := $objects }}{{ if lt $i 3 }}{{ $some = append $some (printf "%s/%s" $o.metadata.namespace $o.metadata.name) }}{{ end }}{{ end }}
{{- fail (printf "this upgrade would delete CustomResourceDefinition %s, and with it %d %s object(s) (%s%s): the CRD in the cluster is not annotated helm.sh/resource-policy=keep (it was installed with crds.keep=false). Keep the CRD with crds.installAll=true (or leave its controller on), or delete those objects first. Setting crds.keep=true in this same upgrade is not enough: Helm reads the annotation from the cluster, so set it in an upgrade of its own first." $name (len $objects) $kind (join ", " $some) (ternary ", ..." "" (gt (len $objects) 3))) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* The operator pod's tolerations: the user's, then, for each of the
node controller's node-loss taints no toleration of the user's names (a
key-less Exists names them all), one NoExecute toleration of
nodeLossTolerationSeconds (null: none, so Kubernetes adds its 300 s). A
YAML list, for fromYamlArray. */}}
{{- define "deckhand.tolerations" -}}
{{- $tolerations := .Values.tolerations | default list }}
{{- $seconds := .Values.nodeLossTolerationSeconds }}
{{- if not (kindIs "invalid" $seconds) }}
{{- range $key := list "node.kubernetes.io/unreachable" "node.kubernetes.io/not-ready" }}
{{- $named := false }}
{{- range $tolerations }}
{{- if or (eq (.key | default "") $key) (and (not .key) (eq (.operator | default "") "Exists")) }}{{ $named = true }}{{ end }}
{{- end }}
{{- if not $named }}
{{- $tolerations = append $tolerations (dict "key" $key "operator" "Exists" "effect" "NoExecute" "tolerationSeconds" $seconds) }}
{{- end }}
{{- end }}
{{- end }}
{{- toYaml $tolerations }}
{{- end }}
