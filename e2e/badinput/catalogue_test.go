package badinput

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/deckhand-dev/deckhand/internal/testenv"
	"github.com/deckhand-dev/deckhand/operator/database"
)

// base is a valid spec of each kind, which the rows spoil one way each.
func base(kind string) map[string]any {
	specs := map[string]map[string]any{
		"BlogPost":      {"title": "Hello", "author": "Ann"},
		"ConfigMonitor": {"configmap": "app-config", "podSelector": map[string]any{"app": "frontend"}},
		"TDSet": {
			"container":        map[string]any{"image": "nginx:1.27", "port": int64(80)},
			"defaultReplica":   int64(1),
			"schedulingConfig": []any{map[string]any{"startTime": int64(9), "endTime": int64(17), "replica": int64(2)}},
		},
		// deletionPolicy Delete: the namespace is released without a final
		// backup (no database server runs on the local cluster).
		"Database":       {"name": "app", "storage-size": "1Gi", "deletionPolicy": "Delete"},
		"DatabaseBackup": {"database": "app-db"},
		"PrometheusJmxExporter": {
			"labelSelector": map[string]any{"app": "java"},
			"config":        map[string]any{"configMapName": "jmx-config", "configMapKey": "config.yaml"},
			"port":          int64(9404),
		},
		"MySQLCluster":        {"secret": "my-secret", "storage": "1Gi", "deletionPolicy": "Delete"},
		"MySQLBackupSchedule": {"cluster": "my-cluster", "time": "0 3 * * *"},
		"MySQLBackupInstance": {"cluster": "my-cluster"},
	}
	return runtime.DeepCopyJSON(specs[kind])
}

// with is kind's base spec with the value at a dotted path set (nil
// removes it).
func with(kind string, kv ...any) map[string]any {
	spec := base(kind)
	for i := 0; i < len(kv); i += 2 {
		fields := strings.Split(kv[i].(string), ".")
		if kv[i+1] == nil {
			unstructured.RemoveNestedField(spec, fields...)
			continue
		}
		if err := unstructured.SetNestedField(spec, runtime.DeepCopyJSONValue(kv[i+1]), fields...); err != nil {
			panic(err)
		}
	}
	return spec
}

// row is one bad object and what a user must see.
type row struct {
	name string
	kind string
	// objName is metadata.name; default: row-<n>.
	objName string
	// spec is the object's spec (any JSON value: a wrong type is a row).
	spec any
	// update, when set, is applied over spec once the object exists: a
	// change of an immutable field.
	update map[string]any
	// refused: words the API server's message must hold; nil means the
	// object is accepted.
	refused []string
	// reports: for accepted objects of a controlled kind, words its
	// conditions or Events must hold.
	reports []string
	// check, when set, looks further at an accepted object's effects.
	check func(t *testing.T, c client.Client, ns string, obj *unstructured.Unstructured)
}

var (
	mebibyte = strings.Repeat("x", 1<<20)
	unicode  = "Grüße, 世界 🚀 ‮rtl‬ \u200b"
	sqlName  = `app'; DROP DATABASE postgres; --`
	shell    = "$(touch /tmp/pwned) `id` ; rm -rf / #"
)

func catalogue() []row {
	rows := []row{
		// BlogPost
		{name: "title missing", kind: "BlogPost", spec: with("BlogPost", "title", nil), refused: []string{"spec.title", "Required value"}},
		{name: "title empty", kind: "BlogPost", spec: with("BlogPost", "title", ""), refused: []string{"spec.title", "at least 1"}},
		{name: "title a number", kind: "BlogPost", spec: with("BlogPost", "title", int64(42)), refused: []string{"spec.title", "must be of type string"}},
		{name: "title of 1 MiB", kind: "BlogPost", spec: with("BlogPost", "title", mebibyte), refused: []string{"spec.title", "Too long"}},
		{name: "author of 64 KiB", kind: "BlogPost", spec: with("BlogPost", "author", mebibyte[:64<<10]), refused: []string{"spec.author", "Too long"}},
		{name: "title of 65 emoji (260 bytes)", kind: "BlogPost", spec: with("BlogPost", "title", strings.Repeat("🚀", 65)), refused: []string{"title must be at most 256 bytes"}},
		{name: "title with a newline", kind: "BlogPost", spec: with("BlogPost", "title", "Hello\nWorld"), refused: []string{"title must not contain control characters"}},
		{name: "unicode title and author", kind: "BlogPost", spec: with("BlogPost", "title", unicode, "author", "Zoë 李"), reports: []string{"Ready=True"}},
		{name: "SQL and shell in title", kind: "BlogPost", spec: with("BlogPost", "title", sqlName+shell), reports: []string{"Ready=True"}},
		{name: "spec a string", kind: "BlogPost", spec: "hello", refused: []string{"spec", "must be of type object"}},
		{name: "spec missing", kind: "BlogPost", spec: nil, refused: []string{"spec", "Required value"}},
		{name: "metadata.name with shell characters", kind: "BlogPost", objName: "x;rm -rf", spec: base("BlogPost"), refused: []string{"metadata.name", "lowercase RFC 1123"}},
		{name: "metadata.name unicode", kind: "BlogPost", objName: "grüße", spec: base("BlogPost"), refused: []string{"metadata.name", "lowercase RFC 1123"}},
		{name: "metadata.name of 253 characters", kind: "BlogPost", objName: strings.Repeat("a", 253), spec: base("BlogPost"), reports: []string{"Ready=True"}},

		// ConfigMonitor
		{name: "no ConfigMap named", kind: "ConfigMonitor", spec: with("ConfigMonitor", "configmap", nil), refused: []string{"set exactly one of configmap", "configMap"}},
		{name: "both spellings of the ConfigMap", kind: "ConfigMonitor", spec: with("ConfigMonitor", "configMap", "other"), refused: []string{"set exactly one of configmap"}},
		{name: "podSelector empty", kind: "ConfigMonitor", spec: with("ConfigMonitor", "podSelector", map[string]any{}), refused: []string{"podSelector must name at least one label"}},
		{name: "podSelector a list", kind: "ConfigMonitor", spec: with("ConfigMonitor", "podSelector", []any{"app=frontend"}), refused: []string{"spec.podSelector", "must be of type object"}},
		{name: "podSelector value with spaces", kind: "ConfigMonitor", spec: with("ConfigMonitor", "podSelector", map[string]any{"app": "front end; rm -rf /"}), reports: []string{"Ready=False InvalidSelector", "podSelector is not a valid label selector"}},
		{name: "podSelector key unicode", kind: "ConfigMonitor", spec: with("ConfigMonitor", "podSelector", map[string]any{"äpp": "x"}), reports: []string{"Ready=False InvalidSelector"}},
		{name: "strategy unknown", kind: "ConfigMonitor", spec: with("ConfigMonitor", "strategy", "Restart"), refused: []string{"spec.strategy", `supported values: "RollingRestart", "DeletePods"`}},
		{name: "debounce not a duration", kind: "ConfigMonitor", spec: with("ConfigMonitor", "debounce", "soon"), refused: []string{"debounce must be a non-negative duration"}},
		{name: "debounce negative", kind: "ConfigMonitor", spec: with("ConfigMonitor", "debounce", "-5s"), refused: []string{"debounce must be a non-negative duration"}},
		{name: "suspend a string", kind: "ConfigMonitor", spec: with("ConfigMonitor", "suspend", "yes"), refused: []string{"spec.suspend", "must be of type boolean"}},
		{name: "ConfigMap name with a slash", kind: "ConfigMonitor", spec: with("ConfigMonitor", "configmap", "../secrets"), refused: []string{"configmap", "name of a ConfigMap"}},
		{name: "ConfigMap name of 254 characters", kind: "ConfigMonitor", spec: with("ConfigMonitor", "configmap", strings.Repeat("a", 254)), refused: []string{"spec.configmap", "Too long"}},
		{name: "Secret name with shell characters", kind: "ConfigMonitor", spec: with("ConfigMonitor", "secret", shell), refused: []string{"secret", "name of a Secret"}},
		{name: "ConfigMap that does not exist", kind: "ConfigMonitor", spec: with("ConfigMonitor", "configmap", "missing"), reports: []string{"ConfigFound=False", "missing"}},

		// TDSet
		{name: "container missing", kind: "TDSet", spec: with("TDSet", "container", nil), refused: []string{"spec.container", "Required value"}},
		{name: "image blank", kind: "TDSet", spec: with("TDSet", "container.image", "   "), refused: []string{"container.image must not be empty"}},
		{name: "port 0", kind: "TDSet", spec: with("TDSet", "container.port", int64(0)), refused: []string{"spec.container.port", "greater than or equal to 1"}},
		{name: "port 70000", kind: "TDSet", spec: with("TDSet", "container.port", int64(70000)), refused: []string{"spec.container.port", "less than or equal to 65535"}},
		{name: "port a word", kind: "TDSet", spec: with("TDSet", "container.port", "eighty"), refused: []string{"spec.container.port", "must be of type integer"}},
		{name: "port beyond int64", kind: "TDSet", spec: with("TDSet", "container.port", 1e30), refused: []string{"spec.container.port"}},
		{name: "defaultReplica negative", kind: "TDSet", spec: with("TDSet", "defaultReplica", int64(-1)), refused: []string{"spec.defaultReplica", "greater than or equal to 0"}},
		{name: "window startTime 24", kind: "TDSet", spec: with("TDSet", "schedulingConfig", []any{map[string]any{"startTime": int64(24), "endTime": int64(2), "replica": int64(1)}}), refused: []string{"startTime must be an hour from 0 to 23"}},
		{name: "window endTime 25:00", kind: "TDSet", spec: with("TDSet", "schedulingConfig", []any{map[string]any{"startTime": "09:00", "endTime": "25:00", "replica": int64(1)}}), refused: []string{"endTime must be an hour from 0 to 23 or a time"}},
		{name: "window empty (start = end)", kind: "TDSet", spec: with("TDSet", "schedulingConfig", []any{map[string]any{"startTime": int64(9), "endTime": "09:00", "replica": int64(1)}}), refused: []string{"startTime and endTime must differ"}},
		{name: "window day Monday", kind: "TDSet", spec: with("TDSet", "schedulingConfig", []any{map[string]any{"startTime": int64(9), "endTime": int64(17), "replica": int64(1), "days": []any{"Monday"}}}), refused: []string{"days[0]", `supported values: "Mon"`}},
		{name: "49 windows", kind: "TDSet", spec: with("TDSet", "schedulingConfig", windows(49)), refused: []string{"spec.schedulingConfig", "must have at most 48 items"}},
		{name: "intervalMint 0", kind: "TDSet", spec: with("TDSet", "intervalMint", int64(0)), refused: []string{"spec.intervalMint", "greater than or equal to 1"}},
		{name: "time zone unknown", kind: "TDSet", spec: with("TDSet", "timeZone", "Mars/Olympus_Mons"), reports: []string{"ScheduleValid=False", "Mars/Olympus_Mons"}},
		{name: "time zone with shell characters", kind: "TDSet", spec: with("TDSet", "timeZone", "$(id)"), reports: []string{"ScheduleValid=False"}},
		{name: "overlapping windows", kind: "TDSet", spec: with("TDSet", "schedulingConfig", []any{
			map[string]any{"startTime": int64(9), "endTime": int64(17), "replica": int64(2)},
			map[string]any{"startTime": int64(12), "endTime": int64(20), "replica": int64(3)},
		}), reports: []string{"ScheduleValid=False", "overlap"}},
		{name: "image with shell characters", kind: "TDSet", spec: with("TDSet", "container.image", "nginx; "+shell), reports: []string{"Ready"}},
		{name: "metadata.name of 64 characters", kind: "TDSet", objName: strings.Repeat("t", 64), spec: base("TDSet"), refused: []string{"metadata.name must be at most 63 characters"}},
		{name: "metadata.name of 63 characters, with a Service", kind: "TDSet", objName: strings.Repeat("t", 63), spec: with("TDSet", "service", map[string]any{"port": int64(80)}), reports: []string{"Ready=True"}},
		{name: "metadata.name starting with a digit, with a Service", kind: "TDSet", objName: "1-tdset", spec: with("TDSet", "service", map[string]any{"port": int64(80)}), reports: []string{"Ready"}},

		// Database
		{name: "storage-size missing", kind: "Database", spec: with("Database", "storage-size", nil), refused: []string{"spec.storage-size", "Required value"}},
		{name: "storage-size not a quantity", kind: "Database", spec: with("Database", "storage-size", "lots"), refused: []string{`storage-size must be a quantity such as 50G or 10Gi, not "lots"`}},
		{name: "storage-size 0", kind: "Database", spec: with("Database", "storage-size", "0"), refused: []string{"storage-size must be more than 0"}},
		{name: "verify Scheduled without a schedule", kind: "Database", spec: with("Database", "backup.verify.mode", "Scheduled"), refused: []string{"verify.schedule is required with mode Scheduled"}},
		{name: "verify userCheck blank", kind: "Database", spec: with("Database", "backup.verify.userCheck", " "), refused: []string{"verify.userCheck must be an SQL query returning true"}},
		{name: "name empty", kind: "Database", spec: with("Database", "name", ""), refused: []string{"name must not be empty"}},
		{name: "name of 64 bytes (16 emoji)", kind: "Database", spec: with("Database", "name", strings.Repeat("😀", 16)), refused: []string{"at most 63 bytes"}},
		{name: "name with a newline", kind: "Database", spec: with("Database", "name", "app\nDROP"), refused: []string{"must not contain control characters"}},
		{name: "name postgres (reserved)", kind: "Database", spec: with("Database", "name", "postgres"), refused: []string{"reserved by PostgreSQL"}},
		{name: "name with SQL", kind: "Database", objName: "sql", spec: with("Database", "name", sqlName), reports: []string{"Initialized"}, check: nameReachesTheJobVerbatim(sqlName)},
		{name: "name with shell characters", kind: "Database", objName: "shell", spec: with("Database", "name", shell), reports: []string{"Initialized"}, check: nameReachesTheJobVerbatim(shell)},
		{name: "name unicode", kind: "Database", spec: with("Database", "name", "données_李"), reports: []string{"Initialized"}},
		{name: "port 65536", kind: "Database", spec: with("Database", "port", int64(65536)), refused: []string{"port must be between 1 and 65535"}},
		{name: "replicas 2147483647", kind: "Database", spec: with("Database", "replicas", int64(2147483647)), refused: []string{"replicas must be at most 32"}},
		{name: "replicas 0", kind: "Database", spec: with("Database", "replicas", int64(0)), refused: []string{"replicas must be at least 1"}},
		{name: "engine MySQL", kind: "Database", spec: with("Database", "engine", "MySQL"), refused: []string{"spec.engine", `supported values: "PostgreSQL"`}},
		{name: "deletionPolicy Keep", kind: "Database", spec: with("Database", "deletionPolicy", "Keep"), refused: []string{"spec.deletionPolicy", `supported values: "Snapshot", "Retain", "Delete"`}},
		{name: "parameter port", kind: "Database", spec: with("Database", "parameters", map[string]any{"port": "1"}), refused: []string{"set by the operator"}},
		{name: "parameter name with shell characters", kind: "Database", spec: with("Database", "parameters", map[string]any{"a;b": "1"}), refused: []string{"each key is a setting name"}},
		{name: "parameter value of 2 KiB", kind: "Database", spec: with("Database", "parameters", map[string]any{"work_mem": mebibyte[:2048]}), refused: []string{"each value is at most 1024 characters"}},
		{name: "backup schedule of four fields", kind: "Database", spec: with("Database", "backup", map[string]any{"schedule": "0 3 * *"}), refused: []string{"schedule must be five cron fields"}},
		{name: "backup schedule out of range", kind: "Database", spec: with("Database", "backup", map[string]any{"schedule": "99 99 * * *"}), reports: []string{"BackupScheduled=False"}},
		{name: "retention keepLast 0", kind: "Database", spec: with("Database", "backup", map[string]any{"retention": map[string]any{"keepLast": int64(0)}}), refused: []string{"retention.keepLast must be at least 1"}},
		{name: "deletionTimeout a word", kind: "Database", spec: with("Database", "deletionTimeout", "later"), refused: []string{"deletionTimeout"}},
		{name: "metadata.name of 53 characters", kind: "Database", objName: strings.Repeat("d", 53), spec: base("Database"), refused: []string{"metadata.name must be at most 52 characters"}},
		{name: "fromBackup that does not exist", kind: "Database", spec: with("Database", "fromBackup", "nope"), reports: []string{"Restored=False", "nope"}},
		{name: "name changed", kind: "Database", spec: base("Database"), update: with("Database", "name", "other"), refused: []string{"name is immutable"}},
		{name: "storage-size shrunk", kind: "Database", spec: base("Database"), update: with("Database", "storage-size", "512Mi"), refused: []string{"storage-size cannot shrink (from 1Gi to 512Mi)"}},
		{name: "storageClassName not a name", kind: "Database", spec: with("Database", "storageClassName", "Fast SSD"), refused: []string{`storageClassName must be the name of a StorageClass (lower-case letters, digits, '-' and '.'), not "Fast SSD"`}},
		{name: "backup volume storageClassName not a name", kind: "Database", spec: with("Database", "backup", map[string]any{"storage": map[string]any{"volume": map[string]any{"storageClassName": "fast_ssd"}}}), refused: []string{`backup.storage.volume.storageClassName must be the name of a StorageClass`, `not "fast_ssd"`}},
		{name: "nodeSelector key with a space", kind: "Database", spec: with("Database", "podTemplate", map[string]any{"nodeSelector": map[string]any{"disk type": "ssd"}}), refused: []string{"podTemplate.nodeSelector: each key must be a label key"}},
		{name: "nodeSelector value with a space", kind: "Database", spec: with("Database", "podTemplate", map[string]any{"nodeSelector": map[string]any{"disktype": "fast ssd"}}), refused: []string{`podTemplate.nodeSelector: "fast ssd" is not a label value`}},
		{name: "nodeSelector value of 64 characters", kind: "Database", spec: with("Database", "podTemplate", map[string]any{"nodeSelector": map[string]any{"disktype": strings.Repeat("s", 64)}}), refused: []string{"spec.podTemplate.nodeSelector.disktype", "Too long"}},
		{name: "memory request above its limit", kind: "Database", spec: with("Database", "resources", map[string]any{"requests": map[string]any{"memory": "2Gi"}, "limits": map[string]any{"memory": "1Gi"}}), refused: []string{"resources: a request (cpu, memory or ephemeral-storage) must not be more than its limit"}},
		{name: "negative cpu limit", kind: "Database", spec: with("Database", "resources", map[string]any{"limits": map[string]any{"cpu": "-1"}}), refused: []string{"resources: cpu, memory and ephemeral-storage requests and limits must not be negative"}},
		{name: "cpu request as a number, under its limit; nodeSelector with a prefix", kind: "Database",
			spec: with("Database", "resources", map[string]any{"requests": map[string]any{"cpu": int64(1)}, "limits": map[string]any{"cpu": "1500m"}},
				"podTemplate", map[string]any{"nodeSelector": map[string]any{"kubernetes.io/os": "linux"}}),
			reports: []string{"Initialized"}},
		{name: "storageClassName changed", kind: "Database", spec: with("Database", "storageClassName", "standard"), update: with("Database", "storageClassName", "expandable"), refused: []string{"storageClassName cannot change"}},
		{name: "fromBackup added later", kind: "Database", spec: base("Database"), update: with("Database", "fromBackup", "b1"), refused: []string{"fromBackup is set at creation only"}},

		// DatabaseBackup
		{name: "database missing", kind: "DatabaseBackup", spec: map[string]any{}, refused: []string{"spec.database", "Required value"}},
		{name: "database with SQL", kind: "DatabaseBackup", spec: with("DatabaseBackup", "database", sqlName), refused: []string{"database", "name of a Database"}},
		{name: "Database that does not exist", kind: "DatabaseBackup", spec: with("DatabaseBackup", "database", "nope"), reports: []string{"nope"}},
		{name: "database changed", kind: "DatabaseBackup", spec: base("DatabaseBackup"), update: with("DatabaseBackup", "database", "other"), refused: []string{"database is immutable"}},
		{name: "method unknown", kind: "DatabaseBackup", spec: with("DatabaseBackup", "method", "Snapshot"), refused: []string{"spec.method", "supported values", "Dump", "BaseBackup"}},
		{name: "method changed", kind: "DatabaseBackup", spec: base("DatabaseBackup"), update: with("DatabaseBackup", "method", "BaseBackup"), refused: []string{"method is immutable: make a new DatabaseBackup for the other method"}},
		{name: "base backup of a Database that does not exist", kind: "DatabaseBackup", spec: with("DatabaseBackup", "database", "nope", "method", "BaseBackup"), reports: []string{"Database nope does not exist"}},

		// PrometheusJmxExporter
		{name: "port 0", kind: "PrometheusJmxExporter", spec: with("PrometheusJmxExporter", "port", int64(0)), refused: []string{"spec.port", "greater than or equal to 1"}},
		{name: "config missing", kind: "PrometheusJmxExporter", spec: with("PrometheusJmxExporter", "config", nil), refused: []string{"spec.config", "Required value"}},
		{name: "labelSelector empty", kind: "PrometheusJmxExporter", spec: with("PrometheusJmxExporter", "labelSelector", map[string]any{}), refused: []string{"labelSelector must name at least one label"}},
		{name: "labelSelector value a number", kind: "PrometheusJmxExporter", spec: with("PrometheusJmxExporter", "labelSelector", map[string]any{"app": int64(5)}), refused: []string{"spec.labelSelector.app", "must be of type string"}},
		{name: "labelSelector value with shell characters", kind: "PrometheusJmxExporter", spec: with("PrometheusJmxExporter", "labelSelector", map[string]any{"app": shell}), reports: []string{"Ready=False InvalidSelector", "labelSelector is not a valid label selector"}},
		{name: "configMapKey with a slash", kind: "PrometheusJmxExporter", spec: with("PrometheusJmxExporter", "config.configMapKey", "../etc/passwd"), refused: []string{"configMapKey must be a ConfigMap key"}},
		{name: "configMapName with a slash", kind: "PrometheusJmxExporter", spec: with("PrometheusJmxExporter", "config.configMapName", "a/b"), refused: []string{"configMapName", "name of a ConfigMap"}},
		{name: "path without a slash", kind: "PrometheusJmxExporter", spec: with("PrometheusJmxExporter", "path", "metrics"), refused: []string{"path must start with /"}},
		{name: "path with a space", kind: "PrometheusJmxExporter", spec: with("PrometheusJmxExporter", "path", "/a b"), refused: []string{"path must start with /"}},
		{name: "jvmMatch with shell characters", kind: "PrometheusJmxExporter", spec: with("PrometheusJmxExporter", "jvmMatch", shell), reports: []string{"ConfigFound=False"}},
		{name: "33 containers", kind: "PrometheusJmxExporter", spec: with("PrometheusJmxExporter", "containers", containers(33)), refused: []string{"spec.containers", "must have at most 32 items"}},
		{name: "ConfigMap that does not exist", kind: "PrometheusJmxExporter", spec: base("PrometheusJmxExporter"), reports: []string{"ConfigFound=False", "jmx-config"}},

		// MySQLCluster, MySQLBackupSchedule, MySQLBackupInstance
		{name: "secret missing", kind: "MySQLCluster", spec: with("MySQLCluster", "secret", nil), refused: []string{"spec.secret", "Required value"}},
		{name: "secret with SQL", kind: "MySQLCluster", spec: with("MySQLCluster", "secret", sqlName), refused: []string{"secret must be the name of a Secret"}},
		{name: "storage not a quantity", kind: "MySQLCluster", spec: with("MySQLCluster", "storage", "big"), refused: []string{`storage must be a quantity such as 1Gi or 500M, not "big"`}},
		{name: "verify schedule without Scheduled", kind: "MySQLCluster", spec: with("MySQLCluster", "backup.verify.schedule", "@weekly"), refused: []string{"verify.schedule is used only with mode Scheduled"}},
		{name: "port 70000", kind: "MySQLCluster", spec: with("MySQLCluster", "port", int64(70000)), refused: []string{"port must be between 1 and 65535"}},
		{name: "replicas 2147483647", kind: "MySQLCluster", spec: with("MySQLCluster", "replicas", int64(2147483647)), refused: []string{"replicas must be at most 32"}},
		{name: "replicas 0", kind: "MySQLCluster", spec: with("MySQLCluster", "replicas", int64(0)), refused: []string{"replicas must be at least 1"}},
		{name: "image of 1 MiB", kind: "MySQLCluster", spec: with("MySQLCluster", "image", mebibyte), refused: []string{"spec.image", "Too long"}},
		{name: "metadata.name with a dot", kind: "MySQLCluster", objName: "my.cluster", spec: base("MySQLCluster"), refused: []string{"metadata.name must be a DNS label"}},
		{name: "unicode image", kind: "MySQLCluster", spec: with("MySQLCluster", "image", "mysql:"+unicode)},
		{name: "backups of a cluster that does not exist", kind: "MySQLBackupSchedule", spec: with("MySQLBackupSchedule", "cluster", "nope")},
		{name: "backup of a cluster that does not exist", kind: "MySQLBackupInstance", spec: with("MySQLBackupInstance", "cluster", "nope")},
		{name: "secret changed", kind: "MySQLCluster", spec: base("MySQLCluster"), update: with("MySQLCluster", "secret", "other"), refused: []string{"secret is immutable"}},
		{name: "storage shrunk", kind: "MySQLCluster", spec: base("MySQLCluster"), update: with("MySQLCluster", "storage", "1Mi"), refused: []string{"storage cannot shrink (from 1Gi to 1Mi)"}},
		{name: "time not cron", kind: "MySQLBackupSchedule", spec: with("MySQLBackupSchedule", "time", "every day"), refused: []string{`time must be five cron fields`, `not "every day"`}},
		{name: "retention empty", kind: "MySQLBackupSchedule", spec: with("MySQLBackupSchedule", "retention", map[string]any{}), refused: []string{"retention needs keepLast, maxAge or both"}},
		{name: "retention maxAge 0s", kind: "MySQLBackupSchedule", spec: with("MySQLBackupSchedule", "retention", map[string]any{"maxAge": "0s"}), refused: []string{"retention.maxAge must be more than 0"}},
		{name: "cluster with shell characters", kind: "MySQLBackupSchedule", spec: with("MySQLBackupSchedule", "cluster", shell), refused: []string{"cluster", "name of a MySQLCluster"}},
		{name: "cluster changed", kind: "MySQLBackupInstance", spec: base("MySQLBackupInstance"), update: with("MySQLBackupInstance", "cluster", "other"), refused: []string{"cluster is immutable"}},
		{name: "schedule added later", kind: "MySQLBackupInstance", spec: base("MySQLBackupInstance"), update: with("MySQLBackupInstance", "schedule", "nightly"), refused: []string{"schedule is immutable"}},
	}
	// Every kind: a spec of 1 MiB in a field the schema does not know
	// (pruned by the API server) and one of over 3 MiB (the request limit).
	for _, kind := range sortedKinds() {
		rows = append(rows,
			row{name: "spec with 1 MiB of unknown fields", kind: kind, spec: withUnknown(base(kind), mebibyte), check: unknownFieldPruned},
			row{name: "request of 3.5 MiB", kind: kind, spec: withUnknown(base(kind), strings.Repeat(mebibyte, 3)+mebibyte[:1<<19]), refused: []string{"too large"}},
		)
	}
	return rows
}

func sortedKinds() []string {
	return slices.Sorted(maps.Keys(kinds))
}

func withUnknown(spec map[string]any, filler string) map[string]any {
	spec["notAField"] = filler
	return spec
}

// unknownFieldPruned checks that the API server dropped the field its
// schema does not know, so the megabyte is not stored.
func unknownFieldPruned(t *testing.T, c client.Client, _ string, obj *unstructured.Unstructured) {
	cur := obj.DeepCopy()
	require.NoError(t, c.Get(context.Background(), client.ObjectKeyFromObject(obj), cur))
	_, found, _ := unstructured.NestedFieldNoCopy(cur.Object, "spec", "notAField")
	assert.False(t, found, "%s %s: the unknown field was stored", obj.GetKind(), obj.GetName())
}

func windows(n int) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = map[string]any{"startTime": fmt.Sprintf("%02d:%02d", i/2, 30*(i%2)), "endTime": fmt.Sprintf("%02d:%02d", i/2, 30*(i%2)+15), "replica": int64(1)}
	}
	return out
}

func containers(n int) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = fmt.Sprintf("c%d", i)
	}
	return out
}

// nameReachesTheJobVerbatim checks that a Database name full of SQL or
// shell reaches the init Job as an environment value, byte for byte, and
// never in its command line, where a shell would read it.
func nameReachesTheJobVerbatim(name string) func(*testing.T, client.Client, string, *unstructured.Unstructured) {
	return func(t *testing.T, c client.Client, ns string, db *unstructured.Unstructured) {
		var jobs batchv1.JobList
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			require.NoError(ct, c.List(context.Background(), &jobs, client.InNamespace(ns), client.MatchingLabels{database.LabelDatabase: db.GetName()}))
			require.NotEmpty(ct, jobs.Items)
		}, 60*time.Second, 250*time.Millisecond, "no Job for Database %s", db.GetName())
		found := false
		for _, job := range jobs.Items {
			for _, ctr := range job.Spec.Template.Spec.Containers {
				for _, arg := range append(append([]string{}, ctr.Command...), ctr.Args...) {
					assert.NotContains(t, arg, name, "Job %s: the database name is in the command line", job.Name)
				}
				for _, env := range ctr.Env {
					if env.Name == "APP_DATABASE" {
						found = true
						assert.Equal(t, name, env.Value)
					}
				}
			}
		}
		assert.True(t, found, "no Job passes APP_DATABASE")
	}
}

// observed is what a user reads about obj: its conditions as
// "Type=Status Reason: message" lines and the messages of its Events.
func observed(t *testing.T, c client.Client, obj *unstructured.Unstructured) string {
	cur := obj.DeepCopy()
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(obj), cur); err != nil {
		return "get: " + err.Error()
	}
	var b strings.Builder
	conditions, _, _ := unstructured.NestedSlice(cur.Object, "status", "conditions")
	for _, raw := range conditions {
		cond, _ := raw.(map[string]any)
		fmt.Fprintf(&b, "%v=%v %v: %v\n", cond["type"], cond["status"], cond["reason"], cond["message"])
	}
	var events corev1.EventList
	if err := c.List(context.Background(), &events, client.InNamespace(obj.GetNamespace())); err == nil {
		for _, e := range events.Items {
			if e.InvolvedObject.Name == obj.GetName() && e.InvolvedObject.Kind == obj.GetKind() {
				fmt.Fprintf(&b, "event %s %s: %s\n", e.Type, e.Reason, e.Message)
			}
		}
	}
	return b.String()
}

// apply creates the row's object (and applies its update), returning the
// object and the message of a refusal ("" when accepted).
func apply(ctx context.Context, c client.Client, ns string, i int, r row) (*unstructured.Unstructured, string, error) {
	name := r.objName
	if name == "" {
		name = fmt.Sprintf("row-%03d", i)
	}
	obj := newObject(r.kind, ns, name, nil)
	if r.spec == nil {
		delete(obj.Object, "spec")
	} else {
		obj.Object["spec"] = r.spec
	}
	err := c.Create(ctx, obj)
	if r.update == nil {
		return obj, refusal(err), nil
	}
	if err != nil {
		return obj, "", fmt.Errorf("creating the object to update: %w", err)
	}
	// The controller may write the object (a finalizer) meanwhile: apply
	// the change to its latest version, as kubectl edit would.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		obj.Object["spec"] = runtime.DeepCopyJSON(r.update)
		return c.Update(ctx, obj)
	})
	return obj, refusal(err), nil
}

// TestCatalogue applies each bad object to the API server, with the
// controllers running: a refused object must say why in words a user
// understands; an accepted one must be reported (conditions, Events) by
// its controller, which must not crash, loop or leave its namespace.
func TestCatalogue(t *testing.T) {
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	panicsBefore := panics(t)
	op := startOperator(t, ns)
	ctx := context.Background()

	type accepted struct {
		r   row
		obj *unstructured.Unstructured
	}
	var watched []accepted
	refusedCount := 0
	for i, r := range catalogue() {
		obj, msg, err := apply(ctx, c, ns, i, r)
		require.NoError(t, err, "%s %s", r.kind, r.name)
		result := "accepted"
		if msg != "" {
			result, refusedCount = "refused", refusedCount+1
		}
		t.Logf("RESULT | %s | %s | %s | %s |", r.name, r.kind, result, tableCell(msg))
		if r.refused == nil {
			if assert.Empty(t, msg, "%s %s: refused", r.kind, r.name) && r.update == nil {
				if kinds[r.kind].controlled {
					watched = append(watched, accepted{r, obj})
				} else if r.check != nil {
					r.check(t, c, ns, obj)
				}
			}
			continue
		}
		if assert.NotEmpty(t, msg, "%s %s: accepted", r.kind, r.name) {
			for _, word := range r.refused {
				assert.Contains(t, msg, word, "%s %s", r.kind, r.name)
			}
		}
	}

	for _, a := range watched {
		want := a.r.reports
		if len(want) == 0 {
			want = []string{"="} // some condition, at least
		}
		var seen string
		ok := assert.Eventually(t, func() bool {
			seen = observed(t, c, a.obj)
			for _, w := range want {
				if !strings.Contains(seen, w) {
					return false
				}
			}
			return true
		}, 30*time.Second, 250*time.Millisecond, "%s %s (%s): the controller did not report %q", a.r.kind, a.r.name, a.obj.GetName(), want)
		if !ok {
			t.Logf("%s %s saw:\n%s", a.r.kind, a.r.name, seen)
		} else {
			t.Logf("REPORTED | %s | %s | %s", a.r.name, a.r.kind, tableCell(firstLine(seen, want)))
		}
		if a.r.check != nil {
			a.r.check(t, c, ns, a.obj)
		}
	}
	t.Logf("RESULT catalogue: %d rows, %d refused, %d accepted (%d watched by a controller)", len(catalogue()), refusedCount, len(catalogue())-refusedCount, len(watched))
	op.assertWellBehaved(t, panicsBefore, 40)
}

// firstLine is the line of seen that holds the first wanted word.
func firstLine(seen string, want []string) string {
	for _, line := range strings.Split(seen, "\n") {
		if strings.Contains(line, want[0]) {
			return line
		}
	}
	return ""
}

// tableCell shortens a message for the results table.
func tableCell(msg string) string {
	msg = strings.ReplaceAll(msg, "|", `\|`)
	msg = strings.ReplaceAll(msg, "\n", " ")
	if r := []rune(msg); len(r) > 300 {
		return string(r[:300]) + "…"
	}
	return msg
}
