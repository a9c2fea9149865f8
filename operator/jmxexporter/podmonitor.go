package jmxexporter

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	banzaiv1alpha1 "github.com/deckhand-dev/deckhand/operator/apis/banzaicloud/v1alpha1"
)

// The PodMonitor is written as unstructured data: deckhand does not
// depend on the prometheus-operator's Go types, and the CRD may be absent.
// The chart grants these rights only with controllers.jmxExporter.podMonitor.
// +kubebuilder:rbac:groups=monitoring.coreos.com,resources=podmonitors,verbs=get;create;patch;delete
// The PodMonitor's owner reference blocks the exporter's deletion until it
// is gone (OwnerReferencesPermissionEnforcement wants this right for that).
// +kubebuilder:rbac:groups=banzaicloud.com,resources=prometheusjmxexporters/finalizers,verbs=update

// ConditionPodMonitor says whether the PodMonitor asked for by
// spec.podMonitor is in place; absent when it is not asked for.
const ConditionPodMonitor = "PodMonitor"

// PodMonitorGVK is the prometheus-operator's PodMonitor.
var PodMonitorGVK = schema.GroupVersionKind{Group: "monitoring.coreos.com", Version: "v1", Kind: "PodMonitor"}

// podMonitorRecheck is how often an exporter asking for a PodMonitor looks
// again: the CRD may be installed later, and the operator watches neither
// CRDs nor PodMonitors (it would need cluster-wide rights for that).
const podMonitorRecheck = 5 * time.Minute

// syncPodMonitor creates, updates or deletes the exporter's PodMonitor and
// sets its condition; it returns when to look again.
func (r *ExporterReconciler) syncPodMonitor(ctx context.Context, e *banzaiv1alpha1.PrometheusJmxExporter) (time.Duration, error) {
	if !e.Spec.PodMonitor {
		if meta.FindStatusCondition(e.Status.Conditions, ConditionPodMonitor) == nil {
			return 0, nil // never asked for, or already cleaned up
		}
		if err := r.deleteOwnPodMonitor(ctx, e); err != nil {
			return 0, err
		}
		meta.RemoveStatusCondition(&e.Status.Conditions, ConditionPodMonitor)
		return 0, nil
	}
	installed, err := r.crds.podMonitorInstalled(r.Client)
	if err != nil {
		return 0, err
	}
	if !installed {
		r.podMonitorProblem(e, "CRDNotInstalled", "the PodMonitor CRD (monitoring.coreos.com/v1, from the prometheus-operator) is not installed; "+
			"Prometheus can still find the pods through their prometheus.io annotations. Looked for again every 5 minutes")
		return podMonitorRecheck, nil
	}
	have := &unstructured.Unstructured{}
	have.SetGroupVersionKind(PodMonitorGVK)
	err = r.Client.Get(ctx, client.ObjectKey{Namespace: e.Namespace, Name: e.Name}, have)
	switch {
	case apierrors.IsForbidden(err):
		r.podMonitorProblem(e, "Forbidden", "the operator may not read or write PodMonitors: install the chart with controllers.jmxExporter.podMonitor=true")
		return podMonitorRecheck, nil
	case meta.IsNoMatchError(err) || apierrors.IsNotFound(err) && isMissingResource(err):
		r.podMonitorProblem(e, "CRDNotInstalled", "the PodMonitor CRD was removed")
		return podMonitorRecheck, nil
	case apierrors.IsNotFound(err):
		have = nil
	case err != nil:
		return 0, err
	case !metav1.IsControlledBy(have, e):
		r.podMonitorProblem(e, "NameTaken", fmt.Sprintf("PodMonitor %s exists and is not this exporter's; it is left alone: delete or rename it", e.Name))
		return podMonitorRecheck, nil
	}
	want, err := r.desiredPodMonitor(e)
	if err != nil {
		return 0, err
	}
	if have != nil && equality.Semantic.DeepEqual(have.Object["spec"], want.Object["spec"]) {
		setCondition(e, ConditionPodMonitor, true, "Created", "PodMonitor "+e.Name+" scrapes the attached pods")
		return podMonitorRecheck, nil
	}
	err = r.Client.Patch(ctx, want, client.Apply, client.FieldOwner(FieldManager), client.ForceOwnership)
	if apierrors.IsForbidden(err) {
		r.podMonitorProblem(e, "Forbidden", "the operator may not write PodMonitors: install the chart with controllers.jmxExporter.podMonitor=true")
		return podMonitorRecheck, nil
	}
	if err != nil {
		return 0, fmt.Errorf("applying PodMonitor %s: %w", e.Name, err)
	}
	if !meta.IsStatusConditionTrue(e.Status.Conditions, ConditionPodMonitor) {
		r.Recorder.Eventf(e, want, corev1.EventTypeNormal, "PodMonitorCreated", "PodMonitor", "PodMonitor %s scrapes the attached pods on port %d%s", e.Name, e.Spec.Port, e.Spec.Path)
	}
	setCondition(e, ConditionPodMonitor, true, "Created", "PodMonitor "+e.Name+" scrapes the attached pods")
	return podMonitorRecheck, nil
}

// podMonitorProblem sets the condition false, with an Event when it was
// not false for that reason already.
func (r *ExporterReconciler) podMonitorProblem(e *banzaiv1alpha1.PrometheusJmxExporter, reason, msg string) {
	if c := meta.FindStatusCondition(e.Status.Conditions, ConditionPodMonitor); c == nil || c.Reason != reason {
		r.Recorder.Eventf(e, nil, corev1.EventTypeWarning, "PodMonitor"+reason, "PodMonitor", "%s", msg)
	}
	setCondition(e, ConditionPodMonitor, false, reason, msg)
}

// crdCheck remembers for a minute that the PodMonitor CRD is missing:
// the client's lazy RESTMapper asks the API server's discovery on every
// miss, and exporters reconcile on every change of their pods.
type crdCheck struct {
	mu        sync.Mutex
	missingAt time.Time
	now       func() time.Time
}

func (c *crdCheck) podMonitorInstalled(cl client.Client) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now
	if c.now != nil {
		now = c.now
	}
	if !c.missingAt.IsZero() && now().Sub(c.missingAt) < time.Minute {
		return false, nil
	}
	_, err := cl.RESTMapper().RESTMapping(PodMonitorGVK.GroupKind(), PodMonitorGVK.Version)
	var discovery *apiutil.ErrResourceDiscoveryFailed
	switch {
	case err == nil:
		c.missingAt = time.Time{}
		return true, nil
	case meta.IsNoMatchError(err), errors.As(err, &discovery) && isMissingResource(err):
		c.missingAt = now()
		return false, nil
	}
	return false, err
}

// isMissingResource: a 404 from discovery or from an unknown resource's
// path, not from an object.
func isMissingResource(err error) bool {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		d := status.Status().Details
		return status.Status().Code == 404 && (d == nil || d.Name == "")
	}
	return apierrors.IsNotFound(err)
}

// desiredPodMonitor scrapes the pods this exporter serves (its label) once
// their metrics answered (the prometheus.io/scrape annotation). The agent's
// port cannot be a declared container port (a running pod's ports are
// immutable), so the target address is the pod's IP and spec.port, and the
// per-container targets Prometheus discovers for a pod collapse into one
// (same labels once the container label is dropped).
func (r *ExporterReconciler) desiredPodMonitor(e *banzaiv1alpha1.PrometheusJmxExporter) (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{
			"selector": map[string]any{"matchLabels": map[string]any{LabelExporter: e.Name}},
			"podMetricsEndpoints": []any{map[string]any{
				"path": e.Spec.Path,
				"relabelings": []any{
					map[string]any{"action": "keep", "sourceLabels": []any{"__meta_kubernetes_pod_annotation_prometheus_io_scrape"}, "regex": "true"},
					map[string]any{"action": "drop", "sourceLabels": []any{"__meta_kubernetes_pod_container_init"}, "regex": "true"},
					map[string]any{"action": "replace", "sourceLabels": []any{"__meta_kubernetes_pod_ip"}, "regex": "(.+)",
						"replacement": "$1:" + strconv.Itoa(int(e.Spec.Port)), "targetLabel": "__address__"},
					map[string]any{"action": "labeldrop", "regex": "container"},
				},
			}},
		},
	}}
	u.SetGroupVersionKind(PodMonitorGVK)
	u.SetNamespace(e.Namespace)
	u.SetName(e.Name)
	u.SetLabels(map[string]string{"app.kubernetes.io/managed-by": "deckhand", LabelExporter: e.Name})
	return u, controllerutil.SetControllerReference(e, u, r.Client.Scheme())
}

// deleteOwnPodMonitor removes the PodMonitor this exporter created, never
// one it does not control, and ignores a missing CRD or right.
func (r *ExporterReconciler) deleteOwnPodMonitor(ctx context.Context, e *banzaiv1alpha1.PrometheusJmxExporter) error {
	if installed, err := r.crds.podMonitorInstalled(r.Client); err != nil || !installed {
		return err
	}
	have := &unstructured.Unstructured{}
	have.SetGroupVersionKind(PodMonitorGVK)
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: e.Namespace, Name: e.Name}, have)
	if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) || meta.IsNoMatchError(err) {
		return nil
	}
	if err != nil || !metav1.IsControlledBy(have, e) {
		return err
	}
	err = r.Client.Delete(ctx, have, client.Preconditions{UID: ptr.To(have.GetUID())})
	if err == nil {
		r.Recorder.Eventf(e, have, corev1.EventTypeNormal, "PodMonitorDeleted", "PodMonitor", "spec.podMonitor is false: PodMonitor %s deleted", e.Name)
	}
	return client.IgnoreNotFound(err)
}
