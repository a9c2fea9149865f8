package database

import (
	"context"
	"net"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
)

// dialPod connects to an instance agent at its pod's address, as the
// operator's cache of the Database's pods has it, rather than through
// cluster DNS. The agent's certificate is still checked against the pod's
// DNS name: the client's URL keeps the name, only the TCP connection goes
// to the address. A failover must reach the old primary's agent to fence
// it exactly when a node's DNS is slowest: on a loaded node a fence failed
// on "lookup ...: i/o timeout", the failover went on, and the restarted
// old primary ran writable beside the promoted standby for 3 s until its
// own guard fenced it. A name the cache does not know is dialled by name. CloudNativePG's operator reaches its instance managers by pod IP
// too.
func (r *Reconciler) dialPod(ctx context.Context, network, addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: instance.StatusTimeout}
	if host, port, err := net.SplitHostPort(addr); err == nil {
		if ip := r.podIP(ctx, host); ip != "" {
			return d.DialContext(ctx, network, net.JoinHostPort(ip, port))
		}
	}
	return d.DialContext(ctx, network, addr)
}

// podIP is the address of the pod that host names in the form the
// operator dials (instance.PodHosts' first: <pod>.<headless>.<namespace>.svc),
// from the cache of the pods the operator owns; "" when it has none.
func (r *Reconciler) podIP(ctx context.Context, host string) string {
	parts := strings.Split(host, ".")
	if len(parts) != 4 || parts[3] != "svc" {
		return ""
	}
	var pod corev1.Pod
	if err := r.Owned.Get(ctx, client.ObjectKey{Namespace: parts[2], Name: parts[0]}, &pod); err != nil {
		return ""
	}
	return pod.Status.PodIP
}
