package testenv

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ReleaseNamespaceOnCleanup deletes the namespace while the test's operator
// still runs (cleanups run last first, so call it after starting the
// operator) and waits until the operator's finalizers let every object of
// the given list types go: without the operator they would hold the
// namespace in Terminating for good.
//
// It deletes those objects itself once the namespace is Terminating, as a
// user may: the namespace controller deletes pods first and only deletes
// anything else once they are gone (OrderedNamespaceDeletion), which waits
// out the servers' 60 s grace period and, on a loaded machine, took most
// of the 2 minutes. What the operator must do is the same either way: let
// its objects go in a namespace being deleted.
func ReleaseNamespaceOnCleanup(t testing.TB, ns string, lists ...client.ObjectList) {
	c := Client(t)
	t.Cleanup(func() {
		ctx := context.Background()
		_ = c.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
		deleteAll(ctx, c, ns, lists)
		deadline := time.Now().Add(2 * time.Minute)
		for time.Now().Before(deadline) {
			if allGone(ctx, c, ns, lists) {
				return
			}
			time.Sleep(250 * time.Millisecond)
		}
		var kinds []string
		for _, l := range lists {
			name := fmt.Sprintf("%T", l) // *v1.DatabaseList
			kinds = append(kinds, strings.TrimSuffix(name[strings.LastIndex(name, ".")+1:], "List")+"s")
		}
		t.Errorf("namespace %s: %s still there 2 minutes after the namespace was deleted", ns, strings.Join(kinds, " or "))
	})
}

func deleteAll(ctx context.Context, c client.Client, ns string, lists []client.ObjectList) {
	for _, l := range lists {
		if err := c.List(ctx, l, client.InNamespace(ns)); err != nil {
			continue // allGone reports what stays
		}
		_ = meta.EachListItem(l, func(o runtime.Object) error {
			_ = c.Delete(ctx, o.(client.Object))
			return nil
		})
	}
}

func allGone(ctx context.Context, c client.Client, ns string, lists []client.ObjectList) bool {
	for _, l := range lists {
		if err := c.List(ctx, l, client.InNamespace(ns)); err != nil || meta.LenList(l) > 0 {
			return false
		}
	}
	return true
}

// APIServerTransport is what a test's proxy on 127.0.0.1 needs to reach the
// local cluster's API server: its URL and a rest.Config that trusts its
// certificate authority, presents no credentials of its own (the client's
// token passes through, so the client acts as itself) and speaks HTTP/1.1
// (connection upgrades, as exec uses, need it).
func APIServerTransport(t testing.TB) (*url.URL, *rest.Config) {
	t.Helper()
	admin := RESTConfig(t)
	target, err := url.Parse(admin.Host)
	require.NoError(t, err)
	ca := admin.CAData
	if len(ca) == 0 {
		ca, err = os.ReadFile(admin.CAFile)
		require.NoError(t, err)
	}
	return target, &rest.Config{Host: admin.Host, TLSClientConfig: rest.TLSClientConfig{CAData: ca, NextProtos: []string{"http/1.1"}}}
}
