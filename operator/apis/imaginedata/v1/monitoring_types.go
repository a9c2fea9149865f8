package v1

// MonitoringSpec says whether and what the instances serve as Prometheus
// metrics (docs/guides/database-monitoring.md).
type MonitoringSpec struct {
	// Enabled: every pod serves PostgreSQL's metrics on its port "metrics"
	// (9187, plain HTTP GET /metrics), from the instance agent. Unset: the
	// default the operator recorded on the Database when it first saw it
	// (annotation stable.imaginedata.co/monitoring-default): on for a new
	// Database, off for one an older operator already ran. Turning it on or
	// off changes the pod template (every pod restarts once). PostgreSQL
	// only.
	// +optional
	Enabled *bool `json:"enabled,omitempty"`

	// CustomQueries names a ConfigMap in the Database's namespace whose key
	// holds queries in CloudNativePG's custom-queries format; the
	// collector runs them as the app role, in a read-only transaction, at
	// every scrape. It reaches the pods as a volume: a change is picked up
	// when the kubelet refreshes it, without a restart.
	// +optional
	CustomQueries *CustomQueriesSource `json:"customQueries,omitempty"`
}

// CustomQueriesSource is a key of a ConfigMap.
type CustomQueriesSource struct {
	// Name of the ConfigMap.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",messageExpression="'monitoring.customQueries.name must be the name of a ConfigMap (lower-case letters, digits, \\'-\\' and \\'.\\'), not \"' + self + '\"'"
	Name string `json:"name"`
	// Key of the ConfigMap that holds the queries (YAML); default
	// queries.yaml.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	// +optional
	Key string `json:"key,omitempty"`
}
