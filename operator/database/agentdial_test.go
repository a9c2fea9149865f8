package database

import (
	"context"
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
)

// The operator reaches an agent at its pod's address from its cache, so a
// fence does not wait on cluster DNS; a name that is not a pod's it knows
// is dialled as it is (localhost here: no query leaves the machine).
func TestTheAgentIsDialledAtItsPodsAddressNotThroughDNS(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	accepted := make(chan struct{}, 2)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- struct{}{}
			c.Close()
		}
	}()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pay-0", Namespace: "shop"}, Status: corev1.PodStatus{PodIP: "127.0.0.1"}}
	r := &Reconciler{Owned: fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(pod).Build()}
	name := instance.PodHosts("pay-0", "pay-headless", "shop")[0]

	conn, err := r.dialPod(context.Background(), "tcp", net.JoinHostPort(name, port))
	require.NoError(t, err, "%s is dialled at its pod's address, not looked up", name)
	conn.Close()
	<-accepted

	unknown := instance.PodHosts("pay-1", "pay-headless", "shop")[0]
	assert.Empty(t, r.podIP(context.Background(), unknown), "a pod the cache does not have has no address")
	conn, err = r.dialPod(context.Background(), "tcp", net.JoinHostPort("localhost", port))
	require.NoError(t, err, "any other name is dialled as it is")
	conn.Close()
	<-accepted
}
