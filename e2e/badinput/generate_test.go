package badinput

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/deckhand-dev/deckhand/internal/testenv"
)

// specsPerKind is how many specs are generated for each CRD; with nine
// CRDs the run stays well under a minute.
const specsPerKind = 30

// generator makes values from an OpenAPI schema: mostly at and around the
// bounds the schema declares (minimum-1, minimum, maximum, maximum+1, the
// same for lengths and item counts), enum members and near misses, strings
// that look like what the fields hold (quantities, durations, times, cron,
// names) and hostile ones (unicode, SQL, shell), and now and then a value
// of the wrong type. A fixed seed makes every run apply the same objects.
type generator struct{ rnd *rand.Rand }

func (g *generator) pick(n int) int { return g.rnd.IntN(n) }

func (g *generator) chance(p float64) bool { return g.rnd.Float64() < p }

// samples are strings the deckhand CRDs' fields hold, valid and not.
var samples = []string{
	"", "a", "app", "app-config", "my-cluster", "Europe/Berlin", "UTC", "Mars/Olympus",
	"1Gi", "0", "-1Gi", "50G", "1.5Ti", "lots", "30s", "0s", "-5s", "1m30s", "720h",
	"09:00", "24:00", "23:59", "25:00", "9", "0 3 * * *", "@daily", "99 99 * * *", "every day",
	"postgres", "pg_x", "template1", "mysql:8.4.8", "postgres:17.6", "nginx:latest",
	"/metrics", "metrics", "config.yaml", "../etc/passwd", "a/b", "A.B", "x.y-z",
	unicode, sqlName, shell, "\x00\x01", "\n", strings.Repeat("é", 40),
}

func (g *generator) value(s *apiextensionsv1.JSONSchemaProps, depth int) any {
	if g.chance(0.04) {
		return g.wrongType(s)
	}
	if s.XIntOrString {
		if g.chance(0.5) {
			return g.integer(&apiextensionsv1.JSONSchemaProps{Minimum: ptrFloat(0), Maximum: ptrFloat(23)})
		}
		return g.str(s)
	}
	switch s.Type {
	case "object":
		return g.object(s, depth)
	case "array":
		return g.array(s, depth)
	case "string":
		return g.str(s)
	case "integer":
		return g.integer(s)
	case "number":
		return g.rnd.Float64() * 100
	case "boolean":
		return g.chance(0.5)
	}
	return nil
}

func (g *generator) wrongType(s *apiextensionsv1.JSONSchemaProps) any {
	switch s.Type {
	case "string":
		return int64(g.pick(100))
	case "integer", "number", "boolean":
		return "seven"
	case "array":
		return map[string]any{"a": "b"}
	}
	return []any{"x"}
}

func (g *generator) object(s *apiextensionsv1.JSONSchemaProps, depth int) map[string]any {
	out := map[string]any{}
	if depth > 6 {
		return out
	}
	names := make([]string, 0, len(s.Properties))
	for name := range s.Properties {
		names = append(names, name)
	}
	slices.Sort(names) // map order would make the seed useless
	for _, name := range names {
		required := slices.Contains(s.Required, name)
		if (required && g.chance(0.95)) || (!required && g.chance(0.5)) {
			prop := s.Properties[name]
			out[name] = g.value(&prop, depth+1)
		}
	}
	if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
		for i := range g.count(s.MinProperties, s.MaxProperties, 4) {
			key := []string{"app", "tier", "app.kubernetes.io/name", "max_connections", "a b", "äpp", "x/y/z", strings.Repeat("k", 64)}[g.pick(8)]
			out[fmt.Sprintf("%s%d", key, i)] = g.value(s.AdditionalProperties.Schema, depth+1)
		}
	}
	return out
}

func (g *generator) array(s *apiextensionsv1.JSONSchemaProps, depth int) []any {
	n := g.count(s.MinItems, s.MaxItems, 3)
	out := make([]any, 0, n)
	for range n {
		if s.Items != nil && s.Items.Schema != nil {
			out = append(out, g.value(s.Items.Schema, depth+1))
		}
	}
	return out
}

// count is a size at or around the declared bounds, or a small one.
func (g *generator) count(minimum, maximum *int64, small int) int {
	choices := []int{0, 1, g.pick(small + 1)}
	if minimum != nil {
		choices = append(choices, int(*minimum), max(int(*minimum)-1, 0))
	}
	if maximum != nil {
		choices = append(choices, int(*maximum), int(*maximum)+1)
	}
	return min(choices[g.pick(len(choices))], 64)
}

func (g *generator) str(s *apiextensionsv1.JSONSchemaProps) string {
	if len(s.Enum) > 0 && g.chance(0.8) {
		return strings.Trim(string(s.Enum[g.pick(len(s.Enum))].Raw), `"`)
	}
	if g.chance(0.25) {
		var lengths []int
		if s.MinLength != nil {
			lengths = append(lengths, int(*s.MinLength), max(int(*s.MinLength)-1, 0))
		}
		if s.MaxLength != nil {
			lengths = append(lengths, int(*s.MaxLength), int(*s.MaxLength)+1)
		}
		if len(lengths) > 0 {
			n := lengths[g.pick(len(lengths))]
			return strings.Repeat(string("az-9.é"[g.pick(5)]), n)
		}
	}
	return samples[g.pick(len(samples))]
}

func (g *generator) integer(s *apiextensionsv1.JSONSchemaProps) int64 {
	choices := []int64{0, 1, -1, 5432, 2147483647, 2147483648}
	if s.Minimum != nil {
		choices = append(choices, int64(*s.Minimum), int64(*s.Minimum)-1)
	}
	if s.Maximum != nil {
		choices = append(choices, int64(*s.Maximum), int64(*s.Maximum)+1)
	}
	return choices[g.pick(len(choices))]
}

func ptrFloat(f float64) *float64 { return &f }

// oneField is a valid spec of kind with one field, anywhere in the
// schema, set to a generated value: most such objects pass admission, so
// the controllers get boundary values one at a time.
func (g *generator) oneField(kind string, schema *apiextensionsv1.JSONSchemaProps) map[string]any {
	var paths [][]string
	var props []*apiextensionsv1.JSONSchemaProps
	var walk func(s *apiextensionsv1.JSONSchemaProps, path []string)
	walk = func(s *apiextensionsv1.JSONSchemaProps, path []string) {
		for _, name := range slices.Sorted(maps.Keys(s.Properties)) {
			prop := s.Properties[name]
			p := append(slices.Clone(path), name)
			paths, props = append(paths, p), append(props, &prop)
			if prop.Type == "object" && len(p) < 4 {
				walk(&prop, p)
			}
		}
	}
	walk(schema, nil)
	spec := base(kind)
	i := g.pick(len(paths))
	if err := unstructured.SetNestedField(spec, runtime.DeepCopyJSONValue(g.value(props[i], len(paths[i]))), paths[i]...); err != nil {
		// A parent holds a value of another type: keep the base.
		return spec
	}
	return spec
}

// specSchema is the schema of spec in the CRD file of kind.
func specSchema(t *testing.T, kind string) *apiextensionsv1.JSONSchemaProps {
	files, err := filepath.Glob(filepath.Join(testenv.Root(t), "crds", "*_"+kinds[kind].plural+".yaml"))
	require.NoError(t, err)
	require.Len(t, files, 1, kind)
	crd := testenv.ReadCRD(t, files[0])
	spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	return &spec
}

// understandable says what is wrong with a refusal's message, "" when a
// person can act on it: it names the object and the field, and is not an
// internal error.
func understandable(msg string) string {
	lower := strings.ToLower(msg)
	switch {
	case strings.TrimSpace(msg) == "":
		return "empty"
	case strings.Contains(lower, "internal error"), strings.Contains(lower, "internalerror"):
		return "an internal error"
	case !strings.Contains(msg, " is invalid: "):
		return "does not say the object is invalid"
	case !strings.Contains(msg, "spec"):
		return "names no field"
	}
	return ""
}

// TestGeneratedSpecs applies specs generated from each CRD's schema with
// the controllers running: whatever the API server refuses must say why;
// whatever it accepts must be handled (some status condition) without a
// panic, a loop or a request to another namespace.
func TestGeneratedSpecs(t *testing.T) {
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	panicsBefore := panics(t)
	op := startOperator(t, ns)
	ctx := context.Background()
	g := &generator{rnd: rand.New(rand.NewPCG(16, 2026))}

	var handled []*unstructured.Unstructured
	for _, kind := range sortedKinds() {
		schema := specSchema(t, kind)
		accepted, refused := 0, 0
		for i := range specsPerKind {
			spec := g.object(schema, 0)
			if i%3 != 0 {
				spec = g.oneField(kind, schema)
			}
			if kind == "TDSet" {
				// A Deployment of 2^31-1 (or 5432) replicas is what the user
				// asked for, but the local cluster, shared with other tests,
				// would start making that many pods.
				capReplicas(spec, 10)
			}
			if kind == "Database" || kind == "MySQLCluster" {
				// No final backup can run here: without a server the
				// namespace would not be released.
				spec["deletionPolicy"] = "Delete"
			}
			obj := newObject(kind, ns, fmt.Sprintf("gen-%s-%02d", strings.ToLower(kind), i), spec)
			msg := refusal(c.Create(ctx, obj))
			if msg == "" {
				accepted++
				if kinds[kind].controlled {
					handled = append(handled, obj)
				}
				continue
			}
			refused++
			assert.Empty(t, understandable(msg), "%s %s refused with a message that %s: %s\nspec: %v", kind, obj.GetName(), understandable(msg), msg, spec)
		}
		t.Logf("RESULT generated | %s | %d applied | %d accepted | %d refused |", kind, specsPerKind, accepted, refused)
	}

	conditions := 0
	for _, obj := range handled {
		ok := assert.Eventually(t, func() bool { return strings.Contains(observed(t, c, obj), "=") }, 30*time.Second, 250*time.Millisecond,
			"%s %s was accepted but its controller reported nothing", obj.GetKind(), obj.GetName())
		if ok {
			conditions++
		}
	}
	time.Sleep(3 * time.Second) // let the last conditions land before the tally
	t.Logf("RESULT generated: %d accepted objects of controlled kinds, %d with a status condition", len(handled), conditions)
	for _, line := range problemsReported(t, handled) {
		t.Logf("RESULT generated reported | %s", line)
	}
	op.assertWellBehaved(t, panicsBefore, 40)
}

// problemsReported tallies, by kind, the False conditions (type and
// reason) the controllers set on the accepted objects: what they said was
// wrong with them.
func problemsReported(t *testing.T, objs []*unstructured.Unstructured) []string {
	c := testenv.Client(t)
	tally := map[string]int{}
	for _, obj := range objs {
		cur := obj.DeepCopy()
		if c.Get(context.Background(), client.ObjectKeyFromObject(obj), cur) != nil {
			continue
		}
		conditions, _, _ := unstructured.NestedSlice(cur.Object, "status", "conditions")
		for _, raw := range conditions {
			cond, _ := raw.(map[string]any)
			if cond["status"] == "False" {
				tally[fmt.Sprintf("%s | %v=False %v", obj.GetKind(), cond["type"], cond["reason"])]++
			}
		}
	}
	lines := make([]string, 0, len(tally))
	for k, n := range tally {
		lines = append(lines, fmt.Sprintf("%s | %d |", k, n))
	}
	slices.Sort(lines)
	return lines
}

// capReplicas lowers every integer field named replica or defaultReplica
// in spec to at most limit.
func capReplicas(v any, limit int64) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if n, ok := x.(int64); ok && (k == "replica" || k == "defaultReplica") && n > limit {
				v[k] = limit
			}
			capReplicas(x, limit)
		}
	case []any:
		for _, x := range v {
			capReplicas(x, limit)
		}
	}
}
