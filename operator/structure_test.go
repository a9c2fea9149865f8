package operator

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// controller-runtime deprecates Result.Requeue: a controller says when to
// come back (RequeueAfter) or returns an error for the rate limiter's
// backoff. go vet does not report deprecated fields, so this test does.
func TestNoControllerSetsTheDeprecatedRequeue(t *testing.T) {
	checked := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
			return err
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		checked++
		ast.Inspect(f, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok && sel.Sel.Name == "Requeue" {
				assert.Fail(t, "deprecated Requeue", "%s reads or sets .Requeue; use RequeueAfter", fset.Position(sel.Pos()))
			}
			if kv, ok := n.(*ast.KeyValueExpr); ok {
				if key, ok := kv.Key.(*ast.Ident); ok && key.Name == "Requeue" {
					assert.Fail(t, "deprecated Requeue", "%s sets Requeue; use RequeueAfter", fset.Position(kv.Pos()))
				}
			}
			return true
		})
		return nil
	})
	require.NoError(t, err)
	require.Positive(t, checked)
}
