package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/deckhand-dev/deckhand/operator/manager"
)

// schema is one JSON schema node.
type schema = map[string]any

// updateValuesSchema rewrites the generated parts of values.schema.json and
// leaves the rest as written by hand:
//
//   - config: one property per operator flag (manager.Flags()), typed, so a
//     misspelt key or a wrong type fails at install, not in a crash-looping
//     pod. Keys the chart sets from its own values are refused by the
//     templates (deckhand.managedConfigKeys), with the value to use instead.
//   - the values holding Kubernetes objects (tolerations, imagePullSecrets,
//     extraEnv, affinity, resources, securityContexts, probes, topology
//     spread, extra volumes and mounts): the fields of the real API types, with
//     additionalProperties false, so a misspelt field is refused instead of
//     being dropped by the API server.
func updateValuesSchema(chartDir string) error {
	path := filepath.Join(chartDir, "values.schema.json")
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var root schema
	if err := json.Unmarshal(b, &root); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	props, ok := root["properties"].(schema)
	if !ok {
		return fmt.Errorf("%s: no top-level properties", path)
	}

	cfg, err := configSchema(manager.Flags())
	if err != nil {
		return err
	}
	props["config"] = cfg

	kube := map[string]struct {
		t           reflect.Type
		list        bool
		required    []string
		description string
	}{
		"tolerations":               {reflect.TypeFor[corev1.Toleration](), true, nil, "the operator pod's tolerations (core/v1 Toleration)"},
		"imagePullSecrets":          {reflect.TypeFor[corev1.LocalObjectReference](), true, []string{"name"}, "Secrets to pull the operator image with (name only)"},
		"extraEnv":                  {reflect.TypeFor[corev1.EnvVar](), true, nil, "more environment variables of the operator container (core/v1 EnvVar)"},
		"affinity":                  {reflect.TypeFor[corev1.Affinity](), false, nil, "the operator pod's affinity (core/v1 Affinity)"},
		"resources":                 {reflect.TypeFor[corev1.ResourceRequirements](), false, nil, "the operator container's resources (core/v1 ResourceRequirements)"},
		"podSecurityContext":        {reflect.TypeFor[corev1.PodSecurityContext](), false, nil, "the operator pod's securityContext (core/v1 PodSecurityContext)"},
		"securityContext":           {reflect.TypeFor[corev1.SecurityContext](), false, nil, "the operator container's securityContext (core/v1 SecurityContext)"},
		"livenessProbe":             {reflect.TypeFor[corev1.Probe](), false, nil, "the operator container's liveness probe (core/v1 Probe)"},
		"readinessProbe":            {reflect.TypeFor[corev1.Probe](), false, nil, "the operator container's readiness probe (core/v1 Probe)"},
		"topologySpreadConstraints": {reflect.TypeFor[corev1.TopologySpreadConstraint](), true, nil, "how the operator's replicas spread (core/v1 TopologySpreadConstraint); an empty labelSelector selects the operator's pods"},
		"extraVolumes":              {reflect.TypeFor[corev1.Volume](), true, []string{"name"}, "more volumes of the operator pod (core/v1 Volume)"},
		"extraVolumeMounts":         {reflect.TypeFor[corev1.VolumeMount](), true, nil, "more volume mounts of the operator container (core/v1 VolumeMount)"},
	}
	for key, k := range kube {
		s, err := typeSchema(k.t, nil)
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		if len(k.required) > 0 {
			s["required"] = k.required
		}
		if k.list {
			s = schema{"type": "array", "items": s}
		}
		s["description"] = k.description
		props[key] = s
	}

	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(root); err != nil {
		return err
	}
	return os.WriteFile(path, out.Bytes(), 0o644)
}

// configSchema lists every operator flag as a key of `config`.
func configSchema(fs *pflag.FlagSet) (schema, error) {
	props := schema{}
	var errs []string
	fs.VisitAll(func(f *pflag.Flag) {
		s, err := flagSchema(f)
		if err != nil {
			errs = append(errs, err.Error())
			return
		}
		props[f.Name] = s
	})
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return schema{
		"type":                 "object",
		"additionalProperties": false,
		"description":          "more operator settings for its config file, keyed by flag name (deckhand --help); keys the chart sets from its own values are refused",
		"properties":           props,
	}, nil
}

// durationPattern is what time.ParseDuration accepts (without a sign).
const durationPattern = `^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`

func flagSchema(f *pflag.Flag) (schema, error) {
	s := schema{"description": f.Usage}
	switch t := f.Value.Type(); t {
	case "bool":
		s["type"] = "boolean"
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64":
		s["type"] = "integer"
	case "float32", "float64":
		s["type"] = "number"
	case "string":
		s["type"] = "string"
	case "duration":
		s["type"] = "string"
		s["pattern"] = durationPattern
	case "stringSlice", "stringArray":
		s["type"] = "array"
		s["items"] = schema{"type": "string"}
	default:
		return nil, fmt.Errorf("flag --%s has type %s, which hack/genchart/schema.go cannot express in values.schema.json yet", f.Name, t)
	}
	return s, nil
}

// enums are the allowed values of Kubernetes string types the API server
// checks; listing them gives the error at install instead.
var enums = map[reflect.Type][]string{
	reflect.TypeFor[corev1.TolerationOperator]():    {string(corev1.TolerationOpExists), string(corev1.TolerationOpEqual)},
	reflect.TypeFor[corev1.TaintEffect]():           {"", string(corev1.TaintEffectNoSchedule), string(corev1.TaintEffectPreferNoSchedule), string(corev1.TaintEffectNoExecute)},
	reflect.TypeFor[corev1.NodeSelectorOperator]():  {"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"},
	reflect.TypeFor[metav1.LabelSelectorOperator](): {"In", "NotIn", "Exists", "DoesNotExist"},
}

// typeSchema is the JSON schema of a Kubernetes API type, from its Go
// fields and their json tags: a field without omitempty is required, as the
// API's own OpenAPI has it.
func typeSchema(t reflect.Type, seen []reflect.Type) (schema, error) {
	switch t {
	case reflect.TypeFor[resource.Quantity]():
		return schema{"type": []string{"string", "number"}}, nil
	case reflect.TypeFor[intstr.IntOrString]():
		return schema{"type": []string{"string", "integer"}}, nil
	case reflect.TypeFor[metav1.Time]():
		return schema{"type": "string", "format": "date-time"}, nil
	case reflect.TypeFor[metav1.FieldsV1]():
		return schema{"type": "object"}, nil
	}
	if t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8 {
		return schema{"type": "string", "description": "base64"}, nil
	}
	if slices.Contains(seen, t) {
		return nil, fmt.Errorf("%s refers to itself", t)
	}
	seen = append(seen, t)
	switch t.Kind() {
	case reflect.Pointer:
		return typeSchema(t.Elem(), seen)
	case reflect.String:
		s := schema{"type": "string"}
		if e, ok := enums[t]; ok {
			s["enum"] = e
		}
		return s, nil
	case reflect.Bool:
		return schema{"type": "boolean"}, nil
	case reflect.Int, reflect.Int32, reflect.Int64:
		return schema{"type": "integer"}, nil
	case reflect.Float32, reflect.Float64:
		return schema{"type": "number"}, nil
	case reflect.Slice:
		items, err := typeSchema(t.Elem(), seen)
		if err != nil {
			return nil, err
		}
		return schema{"type": "array", "items": items}, nil
	case reflect.Map:
		values, err := typeSchema(t.Elem(), seen)
		if err != nil {
			return nil, err
		}
		return schema{"type": "object", "additionalProperties": values}, nil
	case reflect.Struct:
		props, required := schema{}, []string{}
		if err := structFields(t, seen, props, &required); err != nil {
			return nil, err
		}
		s := schema{"type": "object", "additionalProperties": false, "properties": props}
		if len(required) > 0 {
			s["required"] = required
		}
		return s, nil
	}
	return nil, fmt.Errorf("%s: kind %s has no schema mapping", t, t.Kind())
}

// structFields adds the JSON fields of a struct, inlined ones included.
func structFields(t reflect.Type, seen []reflect.Type, props schema, required *[]string) error {
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" && (f.Anonymous || strings.Contains(opts, "inline")) {
			if err := structFields(f.Type, seen, props, required); err != nil {
				return err
			}
			continue
		}
		if name == "" {
			return fmt.Errorf("%s.%s has no json name", t, f.Name)
		}
		s, err := typeSchema(f.Type, seen)
		if err != nil {
			return fmt.Errorf("%s.%s: %w", t, f.Name, err)
		}
		props[name] = s
		if !strings.Contains(opts, "omitempty") && !strings.Contains(opts, "omitzero") {
			*required = append(*required, name)
		}
	}
	return nil
}
