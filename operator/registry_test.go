package operator

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deckhand-dev/deckhand/operator/registration"
)

var fakeRegistry = []registration.Controller{{Name: "tdset"}, {Name: "blogpost"}, {Name: "database"}}

func selectedNames(t *testing.T, items ...string) []string {
	t.Helper()
	cs, err := selectFrom(fakeRegistry, items)
	require.NoError(t, err, "%q", items)
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}

func TestSelectGrammar(t *testing.T) {
	assert.Equal(t, []string{"tdset", "blogpost", "database"}, selectedNames(t, "*"))
	assert.Equal(t, []string{"blogpost"}, selectedNames(t, "blogpost"))
	assert.Equal(t, []string{"tdset", "database"}, selectedNames(t, "database", " tdset ", ""))
	assert.Equal(t, []string{"tdset", "database"}, selectedNames(t, "*", "-blogpost"))
	assert.Equal(t, []string{"tdset"}, selectedNames(t, "tdset", "blogpost", "-blogpost"))
}

func TestSelectUnknownNameListsKnown(t *testing.T) {
	_, err := selectFrom(fakeRegistry, []string{"*", "-nope"})
	require.Error(t, err)
	assert.Equal(t, `unknown controller "nope" in --controllers; known controllers: blogpost, database, tdset (use * for all, -name to leave one out)`, err.Error())
}

func TestSelectNothingIsAnError(t *testing.T) {
	for _, items := range [][]string{nil, {"*", "-tdset", "-blogpost", "-database"}} {
		_, err := selectFrom(fakeRegistry, items)
		require.ErrorContains(t, err, "selects no controller", "%q", items)
	}
}

func TestRegistryEntriesAreComplete(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range Controllers {
		assert.Regexp(t, `^[a-z][a-z0-9]*$`, c.Name)
		assert.False(t, seen[c.Name], "duplicate controller name %q", c.Name)
		seen[c.Name] = true
		assert.Regexp(t, `^[a-z][a-zA-Z0-9]*$`, c.ValuesKey, c.Name)
		assert.Equal(t, c.Name, strings.ToLower(c.ValuesKey), "values key and name differ only in case")
		assert.NotNil(t, c.Setup, c.Name)
		assert.NotNil(t, c.AddToScheme, c.Name)
	}
	all, err := Select([]string{"*"})
	require.NoError(t, err)
	assert.Len(t, all, len(Controllers))
}
