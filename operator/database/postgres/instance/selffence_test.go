package instance_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
)

// The guard's rule, case by case (the host test
// TestAnOldPrimaryTheFenceDidNotReachFencesItselfOnceItsPodNamesAnother
// runs it on real servers).
func TestAnAgentFencesItsOwnServerOnlyWhenItRunsAsAPrimaryItsPodNoLongerNames(t *testing.T) {
	primary := func(named string) instance.Status {
		return instance.Status{ServerUp: true, Role: instance.RolePrimary, NamedPrimary: named}
	}
	standby := instance.Status{ServerUp: true, Role: instance.RoleStandby, NamedPrimary: pod1}
	down := instance.Status{Role: instance.RoleUnknown, NamedPrimary: pod1}
	fenced := primary(pod1)
	fenced.Fenced = true
	for name, c := range map[string]struct {
		st       instance.Status
		replaced string
		promoted bool
		want     bool
	}{
		"an old primary whose pod names another":              {st: primary(pod1), want: true},
		"the primary its pod names":                           {st: primary(pod0)},
		"no name (the scripts not mounted, or the key empty)": {st: primary("")},
		"a standby":      {st: standby},
		"a server down":  {st: down},
		"already fenced": {st: fenced},
		"promoted to replace the pod its pod still names":                  {st: primary(pod1), replaced: pod1, promoted: true},
		"promoted to replace a pod, and a third named since (a later one)": {st: primary(pod1), replaced: "db-2", promoted: true, want: true},
	} {
		assert.Equal(t, c.want, instance.MustFenceItself(pod0, c.st, c.replaced, c.promoted), name)
	}
}
