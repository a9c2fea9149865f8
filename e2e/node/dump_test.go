package node

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// namespaceState is a failed test's account of its namespace: the last
// Events in time order, each pod's phase, Ready condition and labels, the
// endpoints each EndpointSlice routes to, and the operator's log lines that
// name the namespace.
func namespaceState(cs *kubernetes.Clientset, ns string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var b strings.Builder
	writeEvents(ctx, &b, cs, ns, 40)
	writePods(ctx, &b, cs, ns)
	writeEndpointSlices(ctx, &b, cs, ns)
	writeOperatorLines(ctx, &b, cs, ns, 40)
	return b.String()
}

func writeEvents(ctx context.Context, b *strings.Builder, cs *kubernetes.Clientset, ns string, last int) {
	events, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		fmt.Fprintf(b, "events: %v\n", err)
		return
	}
	items := events.Items
	slices.SortFunc(items, func(x, y corev1.Event) int { return eventTime(x).Compare(eventTime(y)) })
	if len(items) > last {
		items = items[len(items)-last:]
	}
	fmt.Fprintf(b, "--- the last %d events:\n", len(items))
	for _, e := range items {
		fmt.Fprintf(b, "%s %s %s/%s %s (x%d): %s\n", eventTime(e).UTC().Format(time.TimeOnly), e.Type,
			e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, max(e.Count, 1), strings.TrimSpace(e.Message))
	}
}

// eventTime is when the event last happened (core Events carry one of
// three times, depending on who recorded them).
func eventTime(e corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

func writePods(ctx context.Context, b *strings.Builder, cs *kubernetes.Clientset, ns string) {
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		fmt.Fprintf(b, "pods: %v\n", err)
		return
	}
	fmt.Fprintln(b, "--- pods:")
	for _, p := range pods.Items {
		ready := "Ready unknown"
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady {
				ready = fmt.Sprintf("Ready=%s since %s", c.Status, c.LastTransitionTime.UTC().Format(time.TimeOnly))
			}
		}
		fmt.Fprintf(b, "%s %s ip %s %s labels %v\n", p.Name, p.Status.Phase, p.Status.PodIP, ready, p.Labels)
	}
}

func writeEndpointSlices(ctx context.Context, b *strings.Builder, cs *kubernetes.Clientset, ns string) {
	list, err := cs.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		fmt.Fprintf(b, "endpointslices: %v\n", err)
		return
	}
	fmt.Fprintln(b, "--- endpointslices:")
	for _, s := range list.Items {
		fmt.Fprintf(b, "%s (service %s):", s.Name, s.Labels[discoveryv1.LabelServiceName])
		for _, e := range s.Endpoints {
			target := "?"
			if e.TargetRef != nil {
				target = e.TargetRef.Name
			}
			fmt.Fprintf(b, " %s=%v ready=%v", target, e.Addresses, e.Conditions.Ready != nil && *e.Conditions.Ready)
		}
		fmt.Fprintln(b)
	}
}

// writeOperatorLines: the operator's last lines that name the namespace,
// from each operator pod (the current run and, after a restart, the
// previous one).
func writeOperatorLines(ctx context.Context, b *strings.Builder, cs *kubernetes.Clientset, ns string, last int) {
	pods, err := cs.CoreV1().Pods(operatorNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		fmt.Fprintf(b, "operator pods: %v\n", err)
		return
	}
	tail := int64(3000)
	for _, p := range pods.Items {
		for _, st := range p.Status.ContainerStatuses {
			raw, err := cs.CoreV1().Pods(operatorNamespace).GetLogs(p.Name, &corev1.PodLogOptions{
				Container: st.Name, TailLines: &tail,
			}).DoRaw(ctx)
			fmt.Fprintf(b, "--- operator %s/%s (restarts %d), lines naming %s:\n", p.Name, st.Name, st.RestartCount, ns)
			if err != nil {
				fmt.Fprintf(b, "(%v)\n", err)
				continue
			}
			var lines []string
			sc := bufio.NewScanner(bytes.NewReader(raw))
			sc.Buffer(make([]byte, 64*1024), 1024*1024)
			for sc.Scan() {
				if strings.Contains(sc.Text(), ns) {
					lines = append(lines, sc.Text())
				}
			}
			if len(lines) > last {
				lines = lines[len(lines)-last:]
			}
			fmt.Fprintln(b, strings.Join(lines, "\n"))
		}
	}
}
