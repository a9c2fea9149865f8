package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// Every CEL message of every CRD reaches the reference, under its kind: a
// user looking up why an object was refused finds the sentence the API
// server printed.
func TestTheReferenceListsEveryAdmissionMessageOfEveryCRD(t *testing.T) {
	crds, err := readCRDs(filepath.Join("..", "..", "crds"))
	require.NoError(t, err)
	require.NotEmpty(t, crds)

	var doc bytes.Buffer
	writeAdmissionRules(&doc, crds)
	out := doc.String()

	files, err := filepath.Glob(filepath.Join("..", "..", "crds", "*.yaml"))
	require.NoError(t, err)
	rules := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		var doc any
		require.NoError(t, yaml.Unmarshal(data, &doc))
		rules += countValidations(doc)
	}
	rows := strings.Count(out, "\n| `.")
	require.Equal(t, rules, rows, "one table row per x-kubernetes-validations entry in crds/")
	for _, crd := range crds {
		require.Contains(t, out, "### "+crd.Spec.Names.Kind+" ("+crd.Spec.Group+"/")
	}
	// ConfigMonitor's seed inconsistency (configMap vs configmap) is settled
	// by a rule whose message a user must be able to find.
	require.Contains(t, out, "configMap")
}

// countValidations counts x-kubernetes-validations entries anywhere in a
// decoded YAML document, independently of the schema types the command uses.
func countValidations(v any) int {
	n := 0
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			if list, ok := e.([]any); ok && k == "x-kubernetes-validations" {
				n += len(list)
				continue
			}
			n += countValidations(e)
		}
	case []any:
		for _, e := range v {
			n += countValidations(e)
		}
	}
	return n
}

func TestCellsKeepATableIntact(t *testing.T) {
	require.Equal(t, `a \|\| b c`, cell("a || b\n   c"))
}

// Every link inside the committed reference lands on exactly one heading:
// types of the same name in two groups must not send a reader to the other
// group's type.
func TestEveryLinkInTheReferenceLandsOnOneHeading(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "api-reference.md"))
	require.NoError(t, err)
	anchors := map[string]int{}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "#") {
			anchors[anchor(strings.TrimSpace(strings.TrimLeft(line, "#")))]++
		}
	}
	links := regexp.MustCompile(`\]\(#([^)]+)\)`).FindAllStringSubmatch(string(data), -1)
	require.NotEmpty(t, links)
	for _, l := range links {
		require.Equal(t, 1, anchors[l[1]], "link #%s", l[1])
	}
}

func TestDisambiguateNamesTheGroupOfATypeNameTwoGroupsUse(t *testing.T) {
	in := "## a.io/v1\n\n#### Retention\n\n| `r` _[Retention](#retention)_ |\n\n#### Only\n\n" +
		"## b.io/v1\n\n#### Retention\n\nsee [Retention](#retention)\n"
	out := string(disambiguate([]byte(in)))
	require.Contains(t, out, "#### Retention (a.io/v1)\n")
	require.Contains(t, out, "[Retention](#retention-aiov1)")
	require.Contains(t, out, "#### Retention (b.io/v1)\n")
	require.Contains(t, out, "[Retention](#retention-biov1)")
	require.Contains(t, out, "#### Only\n")
}
