package jmxexporter

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	banzaiv1alpha1 "github.com/deckhand-dev/deckhand/operator/apis/banzaicloud/v1alpha1"
	"github.com/deckhand-dev/deckhand/operator/jmxexporter/jvm"
	"github.com/deckhand-dev/deckhand/operator/status"
)

// Status list bounds: the status stays small with thousands of pods; each
// pod's own state is on the pod.
const (
	maxEndpoints = 100
	maxProblems  = 20
)

// ExporterReconciler summarises an exporter's pods in its status.
type ExporterReconciler struct {
	Client client.Client
	Cache  client.Reader
	// Reader lists the selected pods' metadata live (their state
	// annotations are not cached).
	Reader   client.Reader
	Files    *artifacts
	Recorder events.EventRecorder
	crds     crdCheck
}

// Reconcile recomputes the exporter's status from its pods' states.
func (r *ExporterReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var e banzaiv1alpha1.PrometheusJmxExporter
	if err := r.Cache.Get(ctx, req.NamespacedName, &e); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !e.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	before := e.DeepCopy()
	if err := r.summarise(ctx, &e); err != nil {
		return ctrl.Result{}, err
	}
	recheck, err := r.syncPodMonitor(ctx, &e)
	if err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: recheck}, status.Patch(ctx, r.Client, before, &e)
}

func (r *ExporterReconciler) summarise(ctx context.Context, e *banzaiv1alpha1.PrometheusJmxExporter) error {
	s := &e.Status
	s.ObservedGeneration = e.Generation
	s.Selector = labels.SelectorFromSet(e.Spec.LabelSelector).String()

	config, hash, problem, err := readConfig(ctx, r.Reader, e)
	if err != nil {
		return err
	}
	s.ConfigHash = hash
	refusal := ""
	if problem != "" {
		setCondition(e, ConditionConfigFound, false, "NotFound", problem+"; nothing is attached until it exists")
		meta.RemoveStatusCondition(&s.Conditions, ConditionConfigValid)
	} else {
		setCondition(e, ConditionConfigFound, true, "Found", "configuration "+hash[:12])
		refusal = configRefusal(e, config, hash)
	}

	// Admission cannot check label syntax inside the map (a CEL rule over
	// its unbounded values exceeds the API server's cost budget), so a
	// selector no pod could carry is reported here, not retried for ever.
	selector, err := labels.ValidatedSelectorFromSet(e.Spec.LabelSelector)
	if err != nil {
		s.SelectedPods, s.AttachedPods, s.Attached = 0, 0, "0/0"
		s.MetricsEndpoints, s.Problems = nil, nil
		setCondition(e, ConditionReady, false, "InvalidSelector", "labelSelector is not a valid label selector: "+err.Error())
		return nil
	}
	pods := &metav1.PartialObjectMetadataList{}
	pods.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
	if err := r.Reader.List(ctx, pods, client.InNamespace(e.Namespace), client.MatchingLabelsSelector{Selector: selector}); err != nil {
		return fmt.Errorf("listing the selected pods: %w", err)
	}
	s.SelectedPods, s.AttachedPods = 0, 0
	s.MetricsEndpoints, s.Problems = nil, nil
	for i := range pods.Items {
		p := &pods.Items[i]
		if !p.DeletionTimestamp.IsZero() {
			continue
		}
		s.SelectedPods++
		st := readState(p)
		switch {
		case st != nil && st.Exporter == e.Name && st.Serving && st.ScrapeConflict != "" && !e.Spec.PodMonitor:
			// Served, but nothing tells Prometheus to scrape it.
			s.Problems = append(s.Problems, banzaiv1alpha1.PodProblem{Pod: p.Name, Container: st.Container, Reason: "ScrapeAnnotationConflict",
				Message: st.ScrapeConflict + "; scrape the pod with spec.podMonitor, or remove the annotations so the operator can set them", Time: &st.Time})
		case st != nil && st.Exporter == e.Name && st.Serving && st.Port == e.Spec.Port:
			s.AttachedPods++
			s.MetricsEndpoints = append(s.MetricsEndpoints, banzaiv1alpha1.MetricsEndpoint{
				Pod: p.Name, Port: st.Port, Container: st.Container, PID: int32(st.PID), ContainerID: st.ContainerID, ConfigHash: st.ConfigHash,
			})
		case st != nil && st.Exporter != "" && st.Exporter != e.Name:
			s.Problems = append(s.Problems, banzaiv1alpha1.PodProblem{Pod: p.Name, Reason: "SelectedByAnother",
				Message: fmt.Sprintf("PrometheusJmxExporter %s, created earlier, serves this pod; one agent per JVM", st.Exporter), Time: &st.Time})
		case st != nil && st.Exporter == e.Name:
			s.Problems = append(s.Problems, problemOf(p.Name, st))
		default:
			s.Problems = append(s.Problems, banzaiv1alpha1.PodProblem{Pod: p.Name, Reason: "Pending", Message: "not attached yet (the pod is not running, or its attach is in progress)"})
		}
	}
	slices.SortFunc(s.MetricsEndpoints, func(a, b banzaiv1alpha1.MetricsEndpoint) int { return strings.Compare(a.Pod, b.Pod) })
	s.MetricsEndpoints = s.MetricsEndpoints[:min(len(s.MetricsEndpoints), maxEndpoints)]
	slices.SortFunc(s.Problems, mostRecentFirst)
	s.Problems = s.Problems[:min(len(s.Problems), maxProblems)]
	s.Attached = fmt.Sprintf("%d/%d", s.AttachedPods, s.SelectedPods)

	switch {
	case problem != "":
		setCondition(e, ConditionReady, false, "ConfigNotFound", problem)
	case refusal != "":
		setCondition(e, ConditionReady, false, jvm.ReasonInvalidConfig, refusal)
	case s.SelectedPods == 0:
		setCondition(e, ConditionReady, true, "NoPodsSelected", "no pod matches labelSelector "+s.Selector)
	case s.AttachedPods == s.SelectedPods:
		setCondition(e, ConditionReady, true, "Attached", fmt.Sprintf("all %d selected pods serve metrics on port %d", s.SelectedPods, e.Spec.Port))
	default:
		first := s.Problems[0]
		setCondition(e, ConditionReady, false, first.Reason, fmt.Sprintf("%s of the selected pods serve metrics; pod %s: %s", s.Attached, first.Pod, first.Message))
	}
	return nil
}

// configRefusal sets ConfigValid from the check of the configuration the
// agent would read (there is no admission point for a ConfigMap's
// content) and returns the refusal, "" when it is valid.
func configRefusal(e *banzaiv1alpha1.PrometheusJmxExporter, config []byte, hash string) string {
	v := jvm.CheckAgentConfig(config)
	if !v.Refused() {
		setCondition(e, ConditionConfigValid, true, "Valid", "configuration "+hash[:12]+" passes the agent's checks")
		return ""
	}
	msg := fmt.Sprintf("configuration %s (ConfigMap %s, key %s) is refused: no agent is attached with it, and running agents keep their previous configuration; %s",
		hash[:12], e.Spec.Config.ConfigMapName, e.Spec.Config.ConfigMapKey, v.Message(false))
	setCondition(e, ConditionConfigValid, false, jvm.ReasonInvalidConfig, msg)
	return msg
}

// mostRecentFirst orders problems by their time, newest first, then those
// without one (pending pods), then by pod name.
func mostRecentFirst(a, b banzaiv1alpha1.PodProblem) int {
	switch {
	case a.Time != nil && b.Time != nil && !a.Time.Equal(b.Time):
		return b.Time.Compare(a.Time.Time)
	case a.Time != nil && b.Time == nil:
		return -1
	case a.Time == nil && b.Time != nil:
		return 1
	}
	return strings.Compare(a.Pod, b.Pod)
}

// problemOf turns a pod's state into the status's view of it.
func problemOf(pod string, st *podState) banzaiv1alpha1.PodProblem {
	reason, msg := st.Reason, st.Message
	switch {
	case reason == "" && st.Result == jvm.Attached:
		reason, msg = jvm.ReasonMetricsNotServed, "the agent is loaded but metrics did not answer yet"
	case reason == "":
		reason = st.Result
	}
	return banzaiv1alpha1.PodProblem{Pod: pod, Container: st.Container, Reason: reason, Message: msg, Time: &st.Time}
}

func setCondition(e *banzaiv1alpha1.PrometheusJmxExporter, kind string, ok bool, reason, msg string) {
	status.SetCondition(&e.Status.Conditions, e.Generation, kind, ok, reason, msg)
}
