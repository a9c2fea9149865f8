package database

import (
	"testing"

	"github.com/stretchr/testify/assert"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
)

// While a new Database's primary replays an archive its server is out of
// reach, for as long as that takes: it is not watched for failover (no
// FailoverBlocked Warning for a primary that is not gone), and it is once
// the recovery is done.
func TestARecoveringPrimaryIsNotWatchedForFailover(t *testing.T) {
	db := DatabaseKind.Clusters.View(&dbv1.Database{
		ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: "ns"},
		Spec: dbv1.DatabaseSpec{Replicas: 2, Recovery: &dbv1.Recovery{
			Source: dbv1.RecoverySource{ObjectStore: dbv1.ObjectStore{Bucket: "archive"}, ServerName: "old-shop"},
		}},
	})
	l := &live{statefulSet: appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "shop", Generation: 1},
		Spec: appsv1.StatefulSetSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "postgres"}, {Name: instance.AgentContainer}},
		}}},
		Status: appsv1.StatefulSetStatus{ObservedGeneration: 1, UpdatedReplicas: 2, CurrentRevision: "r1", UpdateRevision: "r1"},
	}}
	l.exists = map[string]bool{"StatefulSet/shop": true}
	assert.Contains(t, notWatchedNow(db, l, 0), "the primary recovers from an archive")

	db.Status.Conditions = []metav1.Condition{{Type: ConditionRestored, Status: metav1.ConditionTrue, Reason: "Recovered"}}
	assert.Empty(t, notWatchedNow(db, l, 0), "watched once recovered")
}
