package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deckhand-dev/deckhand/operator"
)

// A group leaves unbuiltGroups when its controller registers: its CRDs
// then belong in the chart, behind the controller's toggle.
func TestUnbuiltGroupsHaveNoControllerYet(t *testing.T) {
	for _, c := range operator.Controllers {
		groups, err := groupsOf(c)
		require.NoError(t, err)
		for g := range unbuiltGroups {
			assert.False(t, groups[g], "%s is served by %s now: remove it from unbuiltGroups", g, c.Name)
		}
	}
}
