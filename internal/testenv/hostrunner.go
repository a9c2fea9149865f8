package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// HostRunner runs the pods of one namespace that select it on this
// machine instead of letting kwok fake them: kwok completes every Job pod
// itself (exit 0, no termination message) and its exec never reaches a
// Job, so a test that wants to see what a Job's script really does places
// the pods with the runner's NodeSelector.
//
// No node carries the label that NodeSelector asks for, so the scheduler
// never binds those pods, and kwok (which runs the pods bound to the nodes
// it manages, every node of the test cluster) never sees them. The runner
// takes each such pod while it is unbound:
//   - a Job's pod: runs its container's command and args on the host (as
//     HostOptions.Command builds it, for example as an unprivileged user)
//     with the pod's environment resolved from the API (values,
//     secretKeyRef, configMapKeyRef, the pod's own fields), its ConfigMap
//     volumes written to a directory, its PersistentVolumeClaims and
//     emptyDirs mapped to directories (one per claim, shared by every pod
//     that mounts it), hosts the test serves mapped to 127.0.0.1 (see
//     Serve; a Job waits until every host it is given is served, so no
//     name is ever looked up), and writes the pod's end back through the
//     API: phase Succeeded or Failed, the container terminated with its
//     exit code and its termination message file (or, with
//     FallbackToLogsOnError, the end of its output);
//   - any other pod (a StatefulSet's server, whose real server the test
//     runs itself): marked Running and Ready, as kwok would;
//   - a pod being deleted: its process stopped (an unbound pod is removed
//     at once by the API server).
//
// It watches the namespace's unbound pods (through the test cluster's
// RESTConfig) rather than listing them: a pass over its cache runs on
// every change and every 200 ms.
type HostRunner struct {
	t    testing.TB
	c    client.Client
	ns   string
	opts HostOptions
	root string

	informer cache.SharedIndexInformer
	changed  chan struct{}

	mu       sync.Mutex
	services map[string]string
	started  map[types.UID]*exec.Cmd
	stop     chan struct{}
	done     chan struct{}
}

// HostOptions say how a HostRunner runs a pod's command on the host.
type HostOptions struct {
	// Command is argv run with exactly env (as the user the scripts must
	// run as; servers refuse root).
	Command func(env map[string]string, argv []string) *exec.Cmd
	// Dir makes a directory (the parts joined) that Command's user owns.
	Dir func(parts ...string) string
	// Path is the commands' PATH.
	Path string
	// Timeout bounds one run of a Job's command (default 5 minutes).
	Timeout time.Duration
}

// hostRunnerLabel is the node label a HostRunner's pods select; no node
// has it.
const hostRunnerLabel = "deckhand.dev/host-runner"

// NewHostRunner starts running namespace ns's pods that select it, once
// it has listed them. root is a directory Dir's user owns. It stops at
// the end of the test.
func NewHostRunner(t testing.TB, c client.Client, ns, root string, opts HostOptions) *HostRunner {
	t.Helper()
	if opts.Timeout == 0 {
		opts.Timeout = 5 * time.Minute
	}
	r := &HostRunner{
		t: t, c: c, ns: ns, opts: opts, root: root,
		changed:  make(chan struct{}, 1),
		services: map[string]string{},
		started:  map[types.UID]*exec.Cmd{},
		stop:     make(chan struct{}), done: make(chan struct{}),
	}
	r.informer = r.watch()
	informed := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		defer close(informed)
		r.informer.RunWithContext(ctx)
	}()
	// Registered before the wait, so that a failed sync stops it too.
	t.Cleanup(func() {
		cancel()
		<-informed
	})
	syncCtx, syncCancel := context.WithTimeout(ctx, 30*time.Second)
	defer syncCancel()
	if !cache.WaitForCacheSync(syncCtx.Done(), r.informer.HasSynced) {
		t.Fatalf("host runner: pods of namespace %s never listed", ns)
	}
	go r.loop()
	t.Cleanup(r.close)
	return r
}

// watch is an informer of the namespace's unbound pods that wakes the
// loop on every change. Its watch errors reach the test's log.
func (r *HostRunner) watch() cache.SharedIndexInformer {
	r.t.Helper()
	cfg := RESTConfig(r.t)
	// Protobuf: the race detector makes decoding JSON costly.
	cfg.ContentType = runtime.ContentTypeProtobuf
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		r.t.Fatalf("host runner: %v", err)
	}
	lw := cache.NewListWatchFromClient(cs.CoreV1().RESTClient(), "pods", r.ns, fields.OneTermEqualSelector("spec.nodeName", ""))
	inf := cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{})
	wake := func() {
		select {
		case r.changed <- struct{}{}:
		default:
		}
	}
	_, err = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { wake() },
		UpdateFunc: func(any, any) { wake() },
		DeleteFunc: func(any) { wake() },
	})
	if err == nil {
		err = inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, _ *cache.Reflector, err error) {
			// An ended or expired watch is renewed as a matter of course.
			if ctx.Err() == nil && !errors.Is(err, io.EOF) && !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
				r.t.Logf("host runner: watching pods: %v", err)
			}
		})
	}
	if err != nil {
		r.t.Fatalf("host runner: %v", err)
	}
	return inf
}

// NodeSelector places a pod with the runner: no node matches it.
func (r *HostRunner) NodeSelector() map[string]string {
	return map[string]string{hostRunnerLabel: r.ns}
}

// Serve makes a host that a pod reaches at name (a Service's or a pod's
// name: the first label of "name.namespace.svc...") reach addr
// ("127.0.0.1:port") instead: a variable NAME_HOST naming it becomes
// 127.0.0.1 and NAME_PORT the port.
func (r *HostRunner) Serve(name, addr string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.services[name] = addr
}

// ClaimDir is the host directory that stands for a PersistentVolumeClaim
// of the namespace.
func (r *HostRunner) ClaimDir(claim string) string {
	return r.opts.Dir(r.root, "claims", claim)
}

// CorruptFile flips one byte in the middle of a file on a claim, as a
// disk or a careless hand would: its size stays, its checksum does not.
func (r *HostRunner) CorruptFile(claim, file string) {
	r.t.Helper()
	path := filepath.Join(r.ClaimDir(claim), file)
	b, err := os.ReadFile(path)
	if err == nil && len(b) == 0 {
		err = fmt.Errorf("%s is empty", path)
	}
	if err == nil {
		b[len(b)/2] ^= 0xff
		err = os.WriteFile(path, b, 0o644)
	}
	if err != nil {
		r.t.Fatalf("corrupting %s: %v", path, err)
	}
}

func (r *HostRunner) loop() {
	defer close(r.done)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-r.changed:
		case <-tick.C:
		}
		pods := r.pods()
		listed := map[types.UID]bool{}
		for i := range pods {
			listed[pods[i].UID] = true
			r.handle(&pods[i])
		}
		r.stopGone(listed)
	}
}

// stopGone stops the commands of pods that are gone, as a kubelet stops
// a deleted pod's containers: an unbound pod is removed at once, so the
// runner may never see its deletionTimestamp, and a Job deleted and made
// again under the same name would otherwise run beside its predecessor.
func (r *HostRunner) stopGone(listed map[types.UID]bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for uid, cmd := range r.started {
		if !listed[uid] && cmd != nil {
			kill(cmd)
		}
	}
}

// kill stops cmd and, when it leads a process group of its own, every
// process of the group (a server a script started).
func kill(cmd *exec.Cmd) {
	if cmd.Process == nil {
		return
	}
	pid := cmd.Process.Pid
	if pgid, err := syscall.Getpgid(pid); err == nil && pgid == pid {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}
	_ = cmd.Process.Kill()
}

// pods are the namespace's unbound pods that select the runner, as the
// informer last saw them (copies: the store's are shared).
func (r *HostRunner) pods() []corev1.Pod {
	var mine []corev1.Pod
	for _, o := range r.informer.GetStore().List() {
		p := o.(*corev1.Pod)
		if p.Spec.NodeSelector[hostRunnerLabel] == r.ns {
			mine = append(mine, *p.DeepCopy())
		}
	}
	return mine
}

func (r *HostRunner) handle(pod *corev1.Pod) {
	switch {
	case pod.DeletionTimestamp != nil:
		r.mu.Lock()
		cmd := r.started[pod.UID]
		if cmd != nil {
			kill(cmd)
		}
		r.mu.Unlock()
		_ = r.c.Delete(context.Background(), pod, client.GracePeriodSeconds(0))
	case pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed:
	case ownedBy(pod, "Job"):
		r.mu.Lock()
		_, seen := r.started[pod.UID]
		if !seen {
			r.started[pod.UID] = nil
		}
		r.mu.Unlock()
		if !seen {
			go r.runJobPod(pod.DeepCopy())
		}
	case pod.Status.Phase != corev1.PodRunning:
		// The cache may not have seen the last write yet: decide on the
		// pod as it is now.
		r.writeStatus(pod, func(p *corev1.Pod) {
			if p.Status.Phase != corev1.PodRunning && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
				running(p, true)
			}
		})
	}
}

func ownedBy(pod *corev1.Pod, kind string) bool {
	for _, o := range pod.OwnerReferences {
		if o.Kind == kind {
			return true
		}
	}
	return false
}

// running is the status kwok's pod-ready stage writes.
func running(p *corev1.Pod, ready bool) {
	now := metav1.Now()
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.StartTime = ptr.To(ptr.Deref(p.Status.StartTime, now))
	p.Status.Conditions = []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.ContainersReady, Status: status, LastTransitionTime: now},
		{Type: corev1.PodReady, Status: status, LastTransitionTime: now},
	}
	p.Status.ContainerStatuses = nil
	for _, c := range p.Spec.Containers {
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: c.Image, Ready: ready, Started: ptr.To(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		})
	}
}

func (r *HostRunner) writeStatus(pod *corev1.Pod, change func(*corev1.Pod)) {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var cur corev1.Pod
		if err := r.c.Get(context.Background(), client.ObjectKeyFromObject(pod), &cur); err != nil {
			return err
		}
		change(&cur)
		return r.c.Status().Update(context.Background(), &cur)
	})
	if err != nil && !apierrors.IsNotFound(err) {
		r.t.Logf("host runner: status of pod %s: %v", pod.Name, err)
	}
}

// runJobPod runs the pod's one container on the host and writes its end
// back.
func (r *HostRunner) runJobPod(pod *corev1.Pod) {
	r.writeStatus(pod, func(p *corev1.Pod) { running(p, false) })
	container := pod.Spec.Containers[0]
	if !r.waitServed(pod, container) {
		return
	}
	dir := r.opts.Dir(r.root, "pods", pod.Name)
	termination := filepath.Join(r.opts.Dir(dir, "termination"), "message")
	code, output, err := r.run(pod, container, dir, termination)
	if err != nil {
		output = append(output, []byte("host runner: "+err.Error()+"\n")...)
		code = 128
	}
	r.t.Logf("host runner: pod %s exited %d:\n%s", pod.Name, code, output)
	message, _ := os.ReadFile(termination)
	if code != 0 && len(bytes.TrimSpace(message)) == 0 && container.TerminationMessagePolicy == corev1.TerminationMessageFallbackToLogsOnError {
		message = tail(output, 80, 2048)
	}
	r.writeStatus(pod, func(p *corev1.Pod) {
		now := metav1.Now()
		p.Status.Phase = corev1.PodSucceeded
		reason := "Completed"
		if code != 0 {
			p.Status.Phase, reason = corev1.PodFailed, "Error"
		}
		for i := range p.Status.Conditions {
			if p.Status.Conditions[i].Type == corev1.PodReady || p.Status.Conditions[i].Type == corev1.ContainersReady {
				p.Status.Conditions[i].Status = corev1.ConditionFalse
				p.Status.Conditions[i].Reason = "PodCompleted"
			}
		}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{
			Name: container.Name, Image: container.Image, ImageID: container.Image, Started: ptr.To(false),
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: int32(code), Reason: reason, Message: string(message),
				StartedAt: ptr.Deref(p.Status.StartTime, now), FinishedAt: now,
			}},
		}}
	})
}

// waitServed waits until every host the container is given (a variable
// NAME_HOST) is one the test serves (Serve) or an IP address: a name
// would be looked up in DNS, and tests connect only to 127.0.0.1. False
// when the runner stops first.
func (r *HostRunner) waitServed(pod *corev1.Pod, container corev1.Container) bool {
	for {
		missing := r.unserved(container)
		if missing == "" {
			return true
		}
		select {
		case <-r.stop:
			r.t.Logf("host runner: pod %s never ran: host %s is not served", pod.Name, missing)
			return false
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// unserved is a host of container's environment that the test does not
// serve, or "".
func (r *HostRunner) unserved(container corev1.Container) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range container.Env {
		if !strings.HasSuffix(e.Name, "_HOST") || e.ValueFrom != nil || net.ParseIP(e.Value) != nil {
			continue
		}
		name, _, _ := strings.Cut(e.Value, ".")
		if _, ok := r.services[name]; !ok {
			return e.Value
		}
	}
	return ""
}

// tail is the last lines of out, at most max bytes, as the kubelet's
// FallbackToLogsOnError takes them.
func tail(out []byte, lines, max int) []byte {
	all := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	s := strings.Join(all, "\n")
	if len(s) > max {
		s = s[len(s)-max:]
	}
	return []byte(s)
}

// run runs container's command with its environment on the host: its
// exit code and output.
func (r *HostRunner) run(pod *corev1.Pod, container corev1.Container, dir, termination string) (int, []byte, error) {
	mounts, err := r.mounts(pod, container, dir)
	if err != nil {
		return 0, nil, err
	}
	env, err := r.env(pod, container, mounts)
	if err != nil {
		return 0, nil, err
	}
	env["TERMINATION_MESSAGE_PATH"] = termination
	for k, v := range env {
		if v == container.TerminationMessagePath && container.TerminationMessagePath != "" {
			env[k] = termination
		}
	}
	env["PATH"] = r.opts.Path
	env["HOME"] = r.opts.Dir(dir, "home")
	var argv []string
	for _, a := range append(append([]string{}, container.Command...), container.Args...) {
		argv = append(argv, onHost(a, mounts))
	}
	cmd := r.opts.Command(env, argv)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return 0, nil, err
	}
	r.mu.Lock()
	r.started[pod.UID] = cmd
	r.mu.Unlock()
	timer := time.AfterFunc(r.opts.Timeout, func() { _ = cmd.Process.Kill() })
	defer timer.Stop()
	err = cmd.Wait()
	// Ended: its process ID may be another process's from now on.
	r.mu.Lock()
	r.started[pod.UID] = nil
	r.mu.Unlock()
	if err != nil {
		if exit, ok := err.(*exec.ExitError); ok {
			return exit.ExitCode(), out.Bytes(), nil
		}
		return 0, out.Bytes(), err
	}
	return 0, out.Bytes(), nil
}

// mounts maps each mount path of container to a host directory.
func (r *HostRunner) mounts(pod *corev1.Pod, container corev1.Container, dir string) (map[string]string, error) {
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Spec.Volumes {
		volumes[v.Name] = v
	}
	mounts := map[string]string{}
	for _, m := range container.VolumeMounts {
		v, ok := volumes[m.Name]
		if !ok {
			return nil, fmt.Errorf("volume %s is not in the pod", m.Name)
		}
		switch {
		case v.ConfigMap != nil:
			var cm corev1.ConfigMap
			if err := r.c.Get(context.Background(), client.ObjectKey{Namespace: r.ns, Name: v.ConfigMap.Name}, &cm); err != nil {
				return nil, fmt.Errorf("ConfigMap volume %s: %w", m.Name, err)
			}
			host := r.opts.Dir(dir, "volumes", m.Name)
			for name, data := range cm.Data {
				if err := os.WriteFile(filepath.Join(host, name), []byte(data), 0o444); err != nil {
					return nil, err
				}
			}
			mounts[m.MountPath] = host
		case v.PersistentVolumeClaim != nil:
			mounts[m.MountPath] = r.ClaimDir(v.PersistentVolumeClaim.ClaimName)
		case v.EmptyDir != nil, v.Projected != nil, v.Ephemeral != nil:
			// A projected volume is the service account's token: the
			// scripts never read it. A generic ephemeral volume lives and
			// goes with its pod, as this directory does.
			mounts[m.MountPath] = r.opts.Dir(dir, "volumes", m.Name)
		default:
			return nil, fmt.Errorf("volume %s: a kind the host runner does not map", m.Name)
		}
	}
	return mounts, nil
}

// onHost is value with a mount path it starts with replaced by its host
// directory.
func onHost(value string, mounts map[string]string) string {
	for path, host := range mounts {
		if value == path || strings.HasPrefix(value, path+"/") {
			return host + strings.TrimPrefix(value, path)
		}
	}
	return value
}

// env is the container's environment as the kubelet would set it, moved
// to the host: paths under mounts to their directories, hosts the test
// serves to 127.0.0.1 and their ports.
func (r *HostRunner) env(pod *corev1.Pod, container corev1.Container, mounts map[string]string) (map[string]string, error) {
	ctx := context.Background()
	env := map[string]string{}
	for _, e := range container.Env {
		v, err := r.value(ctx, pod, e)
		if err != nil {
			return nil, fmt.Errorf("env %s: %w", e.Name, err)
		}
		env[e.Name] = onHost(v, mounts)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, v := range env {
		prefix, ok := strings.CutSuffix(k, "_HOST")
		if !ok {
			continue
		}
		name, _, _ := strings.Cut(v, ".")
		addr, ok := r.services[name]
		if !ok {
			continue
		}
		host, port, found := strings.Cut(addr, ":")
		if !found {
			return nil, fmt.Errorf("Serve(%s, %q): not host:port", name, addr)
		}
		env[k] = host
		if _, ok := env[prefix+"_PORT"]; ok {
			env[prefix+"_PORT"] = port
		}
	}
	return env, nil
}

// value resolves one variable of the pod's container.
func (r *HostRunner) value(ctx context.Context, pod *corev1.Pod, e corev1.EnvVar) (string, error) {
	from := e.ValueFrom
	switch {
	case from == nil:
		return e.Value, nil
	case from.SecretKeyRef != nil:
		var s corev1.Secret
		if err := r.c.Get(ctx, client.ObjectKey{Namespace: r.ns, Name: from.SecretKeyRef.Name}, &s); err != nil {
			return "", err
		}
		v, ok := s.Data[from.SecretKeyRef.Key]
		if !ok && !ptr.Deref(from.SecretKeyRef.Optional, false) {
			return "", fmt.Errorf("Secret %s has no key %s", from.SecretKeyRef.Name, from.SecretKeyRef.Key)
		}
		return string(v), nil
	case from.ConfigMapKeyRef != nil:
		var cm corev1.ConfigMap
		if err := r.c.Get(ctx, client.ObjectKey{Namespace: r.ns, Name: from.ConfigMapKeyRef.Name}, &cm); err != nil {
			return "", err
		}
		v, ok := cm.Data[from.ConfigMapKeyRef.Key]
		if !ok && !ptr.Deref(from.ConfigMapKeyRef.Optional, false) {
			return "", fmt.Errorf("ConfigMap %s has no key %s", from.ConfigMapKeyRef.Name, from.ConfigMapKeyRef.Key)
		}
		return v, nil
	case from.FieldRef != nil:
		return fieldOf(pod, from.FieldRef.FieldPath)
	}
	return "", fmt.Errorf("a source the host runner does not resolve")
}

// fieldOf is a downward API field of the pod.
func fieldOf(pod *corev1.Pod, path string) (string, error) {
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	}
	if key, ok := strings.CutPrefix(path, "metadata.labels['"); ok {
		return pod.Labels[strings.TrimSuffix(key, "']")], nil
	}
	if key, ok := strings.CutPrefix(path, "metadata.annotations['"); ok {
		return pod.Annotations[strings.TrimSuffix(key, "']")], nil
	}
	return "", fmt.Errorf("field %s: not one the host runner resolves", path)
}

// close stops the runner and the commands it runs.
func (r *HostRunner) close() {
	close(r.stop)
	<-r.done
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, cmd := range r.started {
		if cmd != nil {
			kill(cmd)
		}
	}
}
