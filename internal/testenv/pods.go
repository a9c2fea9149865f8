package testenv

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ContainerExited writes into a kwok pod's status what a kubelet records
// when its first container exits with message as its termination message
// and is restarted: not ready, one restart more, the last termination. kwok
// runs no container, so a test that ran the container's script on the host
// puts its outcome here.
func ContainerExited(t testing.TB, c client.Client, ns, name, message string) {
	t.Helper()
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var pod corev1.Pod
		require.NoError(t, c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &pod))
		cs := &pod.Status.ContainerStatuses[0]
		cs.Ready, cs.RestartCount = false, cs.RestartCount+1
		cs.LastTerminationState = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", Message: message}}
		SetPodReadyConditions(&pod, corev1.ConditionFalse)
		return c.Status().Update(context.Background(), &pod)
	}))
}

// SetPodReadyConditions sets the pod's Ready and ContainersReady
// conditions, as the kubelet does after a readiness probe, adding them to
// a pod that has none yet (one no node runs).
func SetPodReadyConditions(pod *corev1.Pod, status corev1.ConditionStatus) {
	for _, kind := range []corev1.PodConditionType{corev1.PodReady, corev1.ContainersReady} {
		found := false
		for i := range pod.Status.Conditions {
			if pod.Status.Conditions[i].Type == kind {
				pod.Status.Conditions[i].Status, found = status, true
			}
		}
		if !found {
			pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: kind, Status: status, LastTransitionTime: metav1.Now()})
		}
	}
}

// EnvOf is a container's environment variables with a plain value, by
// name (those from a source are "").
func EnvOf(c corev1.Container) map[string]string {
	out := map[string]string{}
	for _, e := range c.Env {
		out[e.Name] = e.Value
	}
	return out
}

// VolumeNamed is the pod's volume of that name, nil when it has none.
func VolumeNamed(spec corev1.PodSpec, name string) *corev1.Volume {
	for i := range spec.Volumes {
		if spec.Volumes[i].Name == name {
			return &spec.Volumes[i]
		}
	}
	return nil
}
