package jmxexporter

import (
	"encoding/json"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/deckhand-dev/deckhand/operator/jmxexporter/jvm"
)

// Pod annotations and label.
const (
	// AnnotationState is the controller's memory of a pod, kept on the pod
	// (as the seed did) so it survives operator restarts: which exporter
	// attached what, in which container instance, with which configuration.
	AnnotationState = "jmxexporter.deckhand.dev/state"
	// LabelExporter names the exporter serving the pod, so the pods it
	// served are found (and cleaned up) when it changes or is deleted.
	LabelExporter = "jmxexporter.deckhand.dev/exporter"

	AnnotationScrape = "prometheus.io/scrape"
	AnnotationPort   = "prometheus.io/port"
	AnnotationPath   = "prometheus.io/path"
)

// podState is what AnnotationState holds.
type podState struct {
	// Exporter is the PrometheusJmxExporter serving the pod; empty once it
	// was deleted (the record of a loaded agent stays).
	Exporter string `json:"exporter,omitempty"`
	// Generation of the exporter at the last attempt.
	Generation int64 `json:"generation,omitempty"`
	// PodUID: a new pod under the same name starts afresh.
	PodUID types.UID `json:"podUID"`
	// Container, ContainerID and RestartCount identify the container
	// instance; a restarted container is a new JVM and is attached again.
	Container    string `json:"container,omitempty"`
	ContainerID  string `json:"containerID,omitempty"`
	RestartCount int32  `json:"restartCount,omitempty"`
	PID          int    `json:"pid,omitempty"`
	// Port and ConfigHash are what the agent was loaded with.
	Port       int32  `json:"port,omitempty"`
	ConfigHash string `json:"configHash,omitempty"`
	// Result is Attached, Failed or Unknown (jvm's outcomes).
	Result  string `json:"result"`
	Serving bool   `json:"serving,omitempty"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	// Retry: the last failure loaded nothing and may be retried.
	Retry bool `json:"retry,omitempty"`
	// ScrapeConflict says which prometheus.io annotation someone else set
	// to another value; the operator then sets none of them.
	ScrapeConflict string      `json:"scrapeConflict,omitempty"`
	Attempts       int         `json:"attempts,omitempty"`
	Time           metav1.Time `json:"time"`
}

func readState(pod metav1.Object) *podState {
	raw, ok := pod.GetAnnotations()[AnnotationState]
	if !ok {
		return nil
	}
	var s podState
	if json.Unmarshal([]byte(raw), &s) != nil {
		return nil
	}
	return &s
}

func (s *podState) encode() string {
	b, _ := json.Marshal(s)
	return string(b)
}

// loaded says whether an agent may be in the JVM of this container
// instance: attached, of unknown outcome, or failed after the load
// command reached the JVM. A failure that loaded nothing is not final:
// after the user fixes the spec it is tried again.
func (s *podState) loaded() bool {
	return s != nil && jvm.MayHaveLoaded(s.Result, s.Reason)
}

// sameInstance says whether the state describes the container instance
// the pod runs now.
func (s *podState) sameInstance(pod *corev1.Pod) bool {
	if s == nil || s.PodUID != pod.UID {
		return false
	}
	if s.Container == "" {
		return true
	}
	cs := containerStatus(pod, s.Container)
	// A container attached before its runtime reported an ID is the same
	// one while the restart count holds.
	return cs != nil && cs.RestartCount == s.RestartCount && (cs.ContainerID == s.ContainerID || s.ContainerID == "")
}

func containerStatus(pod *corev1.Pod, name string) *corev1.ContainerStatus {
	for i := range pod.Status.ContainerStatuses {
		if pod.Status.ContainerStatuses[i].Name == name {
			return &pod.Status.ContainerStatuses[i]
		}
	}
	return nil
}

// backoff is the wait before retry n (1-based): 10s doubling to 10 min.
func backoff(attempts int) time.Duration {
	d := 10 * time.Second
	for i := 1; i < attempts && d < 10*time.Minute; i++ {
		d *= 2
	}
	return min(d, 10*time.Minute)
}
