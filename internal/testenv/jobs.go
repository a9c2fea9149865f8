package testenv

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// PodQuota lets no more than pods pods run in the namespace: with one, a
// primary runs and a Job's pod is refused; with none, no new pod starts
// (those running stay). kwok completes every Job pod at once, so this is
// how a test decides how a Job ends. It returns once the quota is counted.
func PodQuota(t testing.TB, c client.Client, ns string, pods int64) *corev1.ResourceQuota {
	t.Helper()
	quota := &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pods-%d", pods), Namespace: ns},
		Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: *resource.NewQuantity(pods, resource.DecimalSI)}},
	}
	require.NoError(t, c.Create(context.Background(), quota))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(context.Background(), client.ObjectKeyFromObject(quota), quota))
		require.NotNil(ct, quota.Status.Used)
	}, time.Minute, 100*time.Millisecond, "quota not counted yet")
	return quota
}

// CompleteJob does what Kubernetes does when a Job's pod succeeds.
func CompleteJob(t testing.TB, c client.Client, job *batchv1.Job) {
	t.Helper()
	finishJob(t, c, job, func(now metav1.Time) {
		job.Status.CompletionTime = &now
		job.Status.Succeeded = 1
		job.Status.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, Reason: "CompletionsReached", Message: "Reached expected number of succeeded pods", LastTransitionTime: now},
			{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, Reason: "CompletionsReached", Message: "Reached expected number of succeeded pods", LastTransitionTime: now},
		}
	})
}

// FailJob does what Kubernetes does when a Job's pods fail for good.
func FailJob(t testing.TB, c client.Client, job *batchv1.Job) {
	t.Helper()
	finishJob(t, c, job, func(now metav1.Time) {
		job.Status.Failed = ptr.Deref(job.Spec.BackoffLimit, 6) + 1
		job.Status.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", Message: "Job has reached the specified backoff limit", LastTransitionTime: now},
			{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", Message: "Job has reached the specified backoff limit", LastTransitionTime: now},
		}
	})
}

// finishJob writes the Job's final status, set by end, over its latest
// version: the Job controller (kwok's) may write it between a read and a
// write.
func finishJob(t testing.TB, c client.Client, job *batchv1.Job, end func(now metav1.Time)) {
	t.Helper()
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(job), job); err != nil {
			return err
		}
		now := metav1.Now()
		if job.Status.StartTime == nil {
			// Immutable once the Job controller has set it.
			job.Status.StartTime = &now
		}
		end(now)
		return c.Status().Update(context.Background(), job)
	}))
}
