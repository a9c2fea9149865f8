package manager_test

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deckhand-dev/deckhand/operator"
)

// Each controller owns its settings through its registration: the manager
// reaches controllers only through the registry, so adding one touches the
// registry and its own package, not the manager.
func TestTheManagerImportsNoControllerPackage(t *testing.T) {
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	controllers := map[string]bool{}
	for _, c := range operator.Controllers {
		controllers["github.com/deckhand-dev/deckhand/operator/"+c.Name] = true
	}
	checked := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		parsed, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		require.NoError(t, err)
		for _, imp := range parsed.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			assert.False(t, controllers[path], "%s imports %s: register the controller's settings in its own package instead", f, path)
		}
		checked++
	}
	require.Positive(t, checked)
}
