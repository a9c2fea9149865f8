package database

import (
	"testing"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
)

// A server waiting for its role is told status.currentPrimary (ordinal 0
// for a new cluster), and nothing while a failover is under way: until
// its record completes, who is primary is the failover's to decide.
func TestAWaitingServerIsToldTheCurrentPrimaryButNotDuringAFailover(t *testing.T) {
	db := &Cluster{ObjectMeta: metav1.ObjectMeta{Name: "db"}, Kind: DatabaseKind}
	primary, ok := roleAnswer(db)
	assert.True(t, ok)
	assert.Equal(t, "db-0", primary, "a new cluster's primary")

	db.Status.CurrentPrimary = "db-0"
	for _, phase := range []dbv1.FailoverPhase{dbv1.FailoverFencing, dbv1.FailoverPromoting} {
		db.Status.Failovers = []dbv1.FailoverRecord{{From: "db-0", Phase: phase}}
		_, ok = roleAnswer(db)
		assert.False(t, ok, "no answer while a failover is %s", phase)
	}

	db.Status.Failovers = []dbv1.FailoverRecord{{From: "db-0", To: "db-1", Phase: dbv1.FailoverCompleted}}
	db.Status.CurrentPrimary = "db-1"
	primary, ok = roleAnswer(db)
	assert.True(t, ok)
	assert.Equal(t, "db-1", primary, "after the failover: the old primary is told the new one")
}
