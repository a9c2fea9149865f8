package jmxexporter

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	banzaiv1alpha1 "github.com/deckhand-dev/deckhand/operator/apis/banzaicloud/v1alpha1"
	"github.com/deckhand-dev/deckhand/operator/jmxexporter/jvm"
)

// PodReconciler attaches the agent to the JVM of one pod.
type PodReconciler struct {
	// Client writes (pod metadata by server-side apply).
	Client client.Client
	// Cache holds exporters in full and pods and ConfigMaps as metadata.
	Cache client.Reader
	// Reader reads pods and ConfigMaps live.
	Reader    client.Reader
	Exec      Executor
	Recorder  events.EventRecorder
	Files     *artifacts
	TargetDir string
	Now       func() time.Time
	// checked maps a pod's UID to when its JVM was last looked at.
	checked sync.Map
}

// Reconcile brings one pod to "its JVM serves metrics for its exporter".
func (r *PodReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var pod corev1.Pod
	if err := r.Reader.Get(ctx, req.NamespacedName, &pod); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !pod.DeletionTimestamp.IsZero() {
		r.checked.Delete(pod.UID) // no more rechecks: keep the map to live pods
		return ctrl.Result{}, nil
	}
	var list banzaiv1alpha1.PrometheusJmxExporterList
	if err := r.Cache.List(ctx, &list, client.InNamespace(pod.Namespace)); err != nil {
		return ctrl.Result{}, err
	}
	st := readState(&pod)
	owner := chooseExporter(list.Items, &pod, st)
	if owner == nil {
		return ctrl.Result{}, r.release(ctx, &pod, st)
	}
	if pod.Status.Phase != corev1.PodRunning {
		return ctrl.Result{}, nil // its status change brings it back
	}
	var conflictBefore string
	if st != nil {
		conflictBefore = st.ScrapeConflict
	}
	next, requeue := r.step(ctx, &pod, owner, st)
	r.checkScrapeAnnotations(&pod, owner, next, conflictBefore)
	if err := r.apply(ctx, &pod, owner, next); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: requeue}, nil
}

// chooseExporter picks the exporter serving the pod among those selecting
// it: the one already serving it, else the oldest (then by name).
func chooseExporter(all []banzaiv1alpha1.PrometheusJmxExporter, pod *corev1.Pod, st *podState) *banzaiv1alpha1.PrometheusJmxExporter {
	var candidates []*banzaiv1alpha1.PrometheusJmxExporter
	for i := range all {
		if selects(&all[i], pod.Labels) {
			candidates = append(candidates, &all[i])
		}
	}
	if len(candidates) == 0 {
		return nil
	}
	if st != nil {
		for _, e := range candidates {
			if e.Name == st.Exporter {
				return e
			}
		}
	}
	slices.SortFunc(candidates, olderFirst)
	return candidates[0]
}

func olderFirst(a, b *banzaiv1alpha1.PrometheusJmxExporter) int {
	if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
		return c
	}
	if a.Name < b.Name {
		return -1
	}
	return 1
}

// step decides what the pod needs and does it, returning the new state
// and when to look again.
func (r *PodReconciler) step(ctx context.Context, pod *corev1.Pod, e *banzaiv1alpha1.PrometheusJmxExporter, st *podState) (*podState, time.Duration) {
	now := r.Now()
	config, hash, problem, err := readConfig(ctx, r.Reader, e)
	if err != nil {
		problem = err.Error()
	}
	if st.sameInstance(pod) && st.loaded() {
		if problem != "" {
			// The copy in the container stays; the exporter's status says why.
			next := *st
			next.Exporter = e.Name
			return &next, 0
		}
		return r.keep(ctx, pod, e, st, config, hash)
	}
	if problem != "" {
		return r.failure(pod, e, st, "", jvm.Result{Result: jvm.Failed, Reason: "ConfigNotFound", Message: problem, Retry: true}, hash), 0
	}
	if st.sameInstance(pod) && st.Result == jvm.Failed && st.Generation == e.Generation && st.ConfigHash == hash {
		if !st.Retry {
			return st, 0 // the same spec fails the same way; a change brings the pod back
		}
		if wait := st.Time.Add(backoff(st.Attempts)).Sub(now); wait > 0 {
			return st, wait
		}
	}
	next := r.attach(ctx, pod, e, st, config, hash)
	if next.Result == jvm.Failed && next.Retry {
		return next, backoff(next.Attempts)
	}
	if next.Result == jvm.Attached && !next.Serving {
		return next, backoff(1) // loaded: verify again until metrics answer
	}
	return next, 0
}

// keep handles a container whose JVM already has the agent: new
// configuration, verification, a port change it cannot follow.
func (r *PodReconciler) keep(ctx context.Context, pod *corev1.Pod, e *banzaiv1alpha1.PrometheusJmxExporter, st *podState, config []byte, hash string) (*podState, time.Duration) {
	next := *st
	if next.Exporter != e.Name {
		next.Exporter = e.Name // adopted after its exporter was replaced
	}
	if st.Result == jvm.Unknown || st.Result == jvm.Failed {
		return &next, 0 // never retried; a container restart starts afresh
	}
	if st.Port != e.Spec.Port {
		// The old agent still serves its port: the scrape annotations
		// keep pointing at it (they follow st.Port) until the restart.
		next.Reason = "PortChangeNeedsRestart"
		next.Message = fmt.Sprintf("the agent serves on port %d; spec.port %d takes effect when the container restarts (a loaded agent cannot be moved)", st.Port, e.Spec.Port)
		return &next, 0
	}
	c := r.container(pod, st.Container)
	if st.ConfigHash != hash {
		// The agent re-reads a changed file on its next scrape and exits
		// the JVM over some settings: nothing is copied that it would fail on.
		if v := jvm.CheckAgentConfig(config); v.Refused() {
			return r.refuseChange(pod, e, st, &next, hash, v), 0
		}
		cfg := newFile(configName, config, "0644")
		_, sums, p := c.probe(ctx, []file{cfg})
		if p == nil {
			p = c.ensure(ctx, []file{cfg}, sums)
		}
		if p != nil {
			next.Reason, next.Message = p.Reason, "copying the new configuration: "+p.Message
			return &next, backoff(1)
		}
		configCopies.Inc()
		r.Recorder.Eventf(pod, e, corev1.EventTypeNormal, "ConfigUpdated", "Copy", "configuration %s copied; the agent re-reads it on its next scrape", hash[:12])
		next.ConfigHash, next.Reason, next.Message = hash, "", ""
	} else if next.Reason == jvm.ReasonInvalidConfig {
		next.Reason, next.Message = "", "" // the refused change was undone
	}
	if !next.Serving {
		v := c.helper(ctx, "verify", probeTimeout, "verify", "-port", strconv.Itoa(int(e.Spec.Port)), "-path", e.Spec.Path)
		next.Serving = v.Result == jvm.Serving
		next.Reason, next.Message = v.Reason, v.Message
		if !next.Serving {
			next.Attempts++
			return &next, backoff(next.Attempts)
		}
	}
	return r.recheckJVM(ctx, pod, e, &next, hash)
}

// JVMRecheck is how often the operator asks a container whose JVM has the
// agent whether it still runs the same JVM: a supervisor (a shell loop,
// tini, supervisord) may restart the JVM inside the container, which
// gives a new PID but no new container ID, and the new JVM has no agent.
var JVMRecheck = 5 * time.Minute

// recheckJVM runs the helper's attach again once JVMRecheck has passed
// since the last look: for the same JVM its marker makes it answer
// AlreadyAttached, a new JVM gets the agent. The times live in memory: an
// operator restart looks once more, which is harmless.
func (r *PodReconciler) recheckJVM(ctx context.Context, pod *corev1.Pod, e *banzaiv1alpha1.PrometheusJmxExporter, st *podState, hash string) (*podState, time.Duration) {
	now := r.Now()
	if last, ok := r.checked.Load(pod.UID); ok {
		if wait := last.(time.Time).Add(JVMRecheck).Sub(now); wait > 0 {
			return st, wait
		}
	}
	r.checked.Store(pod.UID, now)
	c := r.container(pod, st.Container)
	res := c.helper(ctx, "attach", attachTimeout, attachArgs(c, e)...)
	if res.Result == jvm.AlreadyAttached && res.JVM != nil && res.JVM.PID == st.PID {
		return st, JVMRecheck
	}
	// Another JVM, or a failure to reach it: recorded as any attach is,
	// so a failure that loaded nothing is retried and a new agent is final.
	next := r.failure(pod, e, st, st.Container, res, hash)
	next.Serving = res.Serving
	if res.JVM != nil {
		next.PID = res.JVM.PID
	}
	r.report(pod, e, res)
	if next.Result == jvm.Failed && next.Retry {
		return next, backoff(next.Attempts)
	}
	return next, JVMRecheck
}

// attachArgs are the helper's attach command for exporter e.
func attachArgs(c *container, e *banzaiv1alpha1.PrometheusJmxExporter) []string {
	return []string{"attach", "-agent", c.path(agentName), "-config", c.path(configName),
		"-port", strconv.Itoa(int(e.Spec.Port)), "-path", e.Spec.Path, "-match", e.Spec.JVMMatch, "-state-dir", path.Join(c.dir, "state")}
}

// refuseChange leaves the running agent's configuration file as it is and
// says why in the pod's state (and so the exporter's status) and, once
// per refused configuration, in an Event.
func (r *PodReconciler) refuseChange(pod *corev1.Pod, e *banzaiv1alpha1.PrometheusJmxExporter, st, next *podState, hash string, v jvm.ConfigVerdict) *podState {
	next.Reason = jvm.ReasonInvalidConfig
	next.Message = fmt.Sprintf("configuration %s not copied, the agent keeps configuration %s: %s", hash[:12], shortHash(st.ConfigHash), v.Message(true))
	if st.Reason != next.Reason || st.Message != next.Message {
		r.Recorder.Eventf(pod, e, corev1.EventTypeWarning, "ConfigRefused", "Copy", "%s", next.Message)
	}
	return next
}

func shortHash(h string) string { return h[:min(len(h), 12)] }

// readConfig reads the exporter's configuration live, with its hash;
// problem says why it cannot be used, err is a failure to ask.
func readConfig(ctx context.Context, reader client.Reader, e *banzaiv1alpha1.PrometheusJmxExporter) (data []byte, hash, problem string, err error) {
	var cm corev1.ConfigMap
	err = reader.Get(ctx, client.ObjectKey{Namespace: e.Namespace, Name: e.Spec.Config.ConfigMapName}, &cm)
	if apierrors.IsNotFound(err) {
		return nil, "", fmt.Sprintf("ConfigMap %s not found", e.Spec.Config.ConfigMapName), nil
	}
	if err != nil {
		return nil, "", "", fmt.Errorf("reading ConfigMap %s: %w", e.Spec.Config.ConfigMapName, err)
	}
	key := e.Spec.Config.ConfigMapKey
	if text, ok := cm.Data[key]; ok {
		data = []byte(text)
	} else if data, ok = cm.BinaryData[key]; !ok {
		return nil, "", fmt.Sprintf("ConfigMap %s has no key %s", e.Spec.Config.ConfigMapName, key), nil
	}
	sum := sha256.Sum256(data)
	return data, hex.EncodeToString(sum[:]), "", nil
}

func (r *PodReconciler) container(pod *corev1.Pod, name string) *container {
	return &container{exec: r.Exec, pod: pod, name: name, dir: r.TargetDir}
}

// attach finds the JVM's container, copies the files and loads the agent.
func (r *PodReconciler) attach(ctx context.Context, pod *corev1.Pod, e *banzaiv1alpha1.PrometheusJmxExporter, st *podState, config []byte, hash string) *podState {
	// Checked here, before anything is copied or executed; the helper
	// checks the copy again in the container (CheckConfig).
	if v := jvm.CheckAgentConfig(config); v.Refused() {
		res := jvm.Result{Result: jvm.Failed, Reason: jvm.ReasonInvalidConfig, Retry: true, Message: v.Message(false)}
		r.report(pod, e, res)
		return r.failure(pod, e, st, "", res, hash)
	}
	names := runningContainers(pod, e.Spec.Containers)
	if len(names) == 0 {
		return r.failure(pod, e, st, "", jvm.Result{Result: jvm.Failed, Reason: "NoRunningContainer", Retry: true,
			Message: "no running container to look for a JVM in" + containersNote(e)}, hash)
	}
	target, problem := r.findJVMContainer(ctx, pod, e, names)
	if problem != nil {
		return r.failure(pod, e, st, target, *problem, hash)
	}
	c := r.container(pod, target)
	agent, err := r.Files.agent()
	if err != nil {
		return r.failure(pod, e, st, target, jvm.Result{Result: jvm.Failed, Reason: "AgentMissing", Retry: true,
			Message: "the operator cannot read the agent jar (--jmxexporter-agent-jar): " + err.Error()}, hash)
	}
	files := []file{agent, newFile(configName, config, "0644")}
	arch, sums, p := c.probe(ctx, append([]file{{name: helperName}}, files...))
	if p == nil {
		var helper file
		if helper, p = r.helperFor(arch); p == nil {
			p = c.ensure(ctx, append([]file{helper}, files...), sums)
		}
	}
	if p != nil {
		return r.failure(pod, e, st, target, *p, hash)
	}
	res := c.helper(ctx, "attach", attachTimeout, attachArgs(c, e)...)
	r.checked.Store(pod.UID, r.Now())
	next := r.failure(pod, e, st, target, res, hash)
	next.Serving = res.Serving
	if res.JVM != nil {
		next.PID = res.JVM.PID
	}
	r.report(pod, e, res)
	return next
}

// findJVMContainer is the one container (of names) running a matching
// JVM. With one candidate the attach itself looks; with several, the
// helper discovers in each first.
func (r *PodReconciler) findJVMContainer(ctx context.Context, pod *corev1.Pod, e *banzaiv1alpha1.PrometheusJmxExporter, names []string) (string, *jvm.Result) {
	if len(names) == 1 {
		return names[0], nil
	}
	var found []string
	for _, name := range names {
		c := r.container(pod, name)
		arch, sums, p := c.probe(ctx, []file{{name: helperName}})
		if p != nil {
			if p.Reason == "NoShell" {
				continue // a sidecar without a shell runs no Java we could reach
			}
			return name, p
		}
		helper, p := r.helperFor(arch)
		if p == nil {
			p = c.ensure(ctx, []file{helper}, sums)
		}
		if p != nil {
			return name, p
		}
		res := c.helper(ctx, "discover", probeTimeout, "discover", "-match", e.Spec.JVMMatch)
		for range res.JVMs {
			found = append(found, name)
		}
	}
	switch len(found) {
	case 0:
		return "", &jvm.Result{Result: jvm.Failed, Reason: jvm.ReasonNoJVM, Retry: true, Message: "no Java process found in containers " + fmt.Sprint(names)}
	case 1:
		return found[0], nil
	}
	return "", &jvm.Result{Result: jvm.Failed, Reason: jvm.ReasonAmbiguousJVM, Retry: true,
		Message: fmt.Sprintf("%d Java processes found (containers %v); one port serves one agent per pod: set spec.jvmMatch or spec.containers", len(found), found)}
}

func (r *PodReconciler) helperFor(uname string) (file, *jvm.Result) {
	arch, err := goArch(uname)
	if err == nil {
		var f file
		if f, err = r.Files.helper(arch); err == nil {
			return f, nil
		}
	}
	return file{}, &jvm.Result{Result: jvm.Failed, Reason: "HelperMissing", Retry: true,
		Message: "no attach helper for this container: " + err.Error()}
}

// failure records an attempt's result as the pod's new state.
func (r *PodReconciler) failure(pod *corev1.Pod, e *banzaiv1alpha1.PrometheusJmxExporter, st *podState, target string, res jvm.Result, hash string) *podState {
	next := &podState{
		Exporter: e.Name, Generation: e.Generation, PodUID: pod.UID, Container: target,
		Port: e.Spec.Port, ConfigHash: hash, Result: res.Result, Reason: res.Reason, Message: res.Message,
		Retry: res.Retry, Attempts: 1, Time: metav1.NewTime(r.Now().Truncate(time.Second)),
	}
	if res.Result == jvm.AlreadyAttached {
		next.Result = jvm.Attached
	}
	if target != "" {
		if cs := containerStatus(pod, target); cs != nil {
			next.ContainerID, next.RestartCount = cs.ContainerID, cs.RestartCount
		}
	}
	if st != nil && st.sameInstance(pod) && st.Result == jvm.Failed && st.Reason == res.Reason {
		next.Attempts = st.Attempts + 1
	}
	return next
}

// report counts the attempt and tells the user through Events.
func (r *PodReconciler) report(pod *corev1.Pod, e *banzaiv1alpha1.PrometheusJmxExporter, res jvm.Result) {
	attaches.WithLabelValues(res.Result, res.Reason).Inc()
	switch res.Result {
	case jvm.Attached:
		r.Recorder.Eventf(pod, e, corev1.EventTypeNormal, "Attached", "Attach", "JMX exporter agent loaded into JVM %d; metrics on port %d%s", res.JVM.PID, e.Spec.Port, e.Spec.Path)
	case jvm.AlreadyAttached:
		// The pod carries no record of it (an attach whose state write was
		// lost, or an operator restarted mid-attach): it is attached all
		// the same, and the user hears so once, as for any attach.
		r.Recorder.Eventf(pod, e, corev1.EventTypeNormal, "Attached", "Attach", "JMX exporter agent already loaded in JVM %d (by an earlier attach); metrics on port %d%s", res.JVM.PID, e.Spec.Port, e.Spec.Path)
	case jvm.Unknown:
		r.Recorder.Eventf(pod, e, corev1.EventTypeWarning, "AttachOutcomeUnknown", "Attach", "%s; not retried (loading the agent twice would exit the JVM) until the container restarts", res.Message)
	case jvm.Failed:
		r.Recorder.Eventf(pod, e, corev1.EventTypeWarning, "AttachFailed", "Attach", "%s: %s", res.Reason, res.Message)
	}
	if res.Warning != "" {
		r.Recorder.Eventf(pod, e, corev1.EventTypeWarning, "DynamicAgentWarning", "Attach", "%s", res.Warning)
	}
}

// apply writes the pod's state, label and scrape annotations by server-
// side apply: fields this manager stops applying are removed, fields the
// user set themselves stay.
func (r *PodReconciler) apply(ctx context.Context, pod *corev1.Pod, e *banzaiv1alpha1.PrometheusJmxExporter, st *podState) error {
	annotations := map[string]string{AnnotationState: st.encode()}
	lbls := map[string]string{}
	if e != nil {
		lbls[LabelExporter] = e.Name
		if st.Serving && st.ScrapeConflict == "" {
			maps.Copy(annotations, scrapeAnnotations(st.Port, e.Spec.Path))
		}
	}
	if r.unchanged(pod, annotations, lbls) {
		return nil
	}
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("v1")
	u.SetKind("Pod")
	u.SetNamespace(pod.Namespace)
	u.SetName(pod.Name)
	u.SetUID(pod.UID) // never write onto a new pod of the same name
	u.SetAnnotations(annotations)
	u.SetLabels(lbls)
	err := r.Client.Patch(ctx, u, client.Apply, client.FieldOwner(FieldManager), client.ForceOwnership)
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // the pod is gone or replaced; its events bring us back
	}
	return err
}

// scrapeAnnotations are what a pod whose agent serves on port carries.
// The port is the one the loaded agent serves, which stays until the
// container restarts even when spec.port changed.
func scrapeAnnotations(port int32, path string) map[string]string {
	return map[string]string{AnnotationScrape: "true", AnnotationPort: strconv.Itoa(int(port)), AnnotationPath: path}
}

// checkScrapeAnnotations records on the state whether someone else set a
// prometheus.io annotation to another value than the operator's (a
// Spring Boot app scraped on 8080): the operator then sets none of them,
// as server-side apply with forced ownership would take them over and
// releasing the pod would delete them. It tells the user once.
func (r *PodReconciler) checkScrapeAnnotations(pod *corev1.Pod, e *banzaiv1alpha1.PrometheusJmxExporter, st *podState, before string) {
	st.ScrapeConflict = ""
	if !st.Serving {
		return
	}
	st.ScrapeConflict = scrapeConflict(pod, scrapeAnnotations(st.Port, e.Spec.Path))
	if st.ScrapeConflict != "" && st.ScrapeConflict != before {
		r.Recorder.Eventf(pod, e, corev1.EventTypeWarning, "ScrapeAnnotationConflict", "Annotate",
			"%s; the operator leaves the prometheus.io annotations as they are. Metrics are served on port %d%s: scrape them with spec.podMonitor, or remove the annotations so the operator can set them",
			st.ScrapeConflict, st.Port, e.Spec.Path)
	}
}

// scrapeConflict names the first annotation of want that the pod carries
// with another value, set by another manager; "" when none.
func scrapeConflict(pod *corev1.Pod, want map[string]string) string {
	ours := annotationsAppliedByUs(pod)
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if have, ok := pod.Annotations[k]; ok && have != want[k] && !ours[k] {
			return fmt.Sprintf("%s is %s, not %s, and was set by someone else", k, have, want[k])
		}
	}
	return ""
}

// annotationsAppliedByUs are the annotation keys this manager owns, from
// the pod's managed fields.
func annotationsAppliedByUs(pod *corev1.Pod) map[string]bool {
	out := map[string]bool{}
	for _, mf := range pod.ManagedFields {
		if mf.Manager != FieldManager || mf.Operation != metav1.ManagedFieldsOperationApply || mf.FieldsV1 == nil {
			continue
		}
		var fields struct {
			Metadata struct {
				Annotations map[string]json.RawMessage `json:"f:annotations"`
			} `json:"f:metadata"`
		}
		if json.Unmarshal(mf.FieldsV1.Raw, &fields) != nil {
			continue
		}
		for k := range fields.Metadata.Annotations {
			if key, ok := strings.CutPrefix(k, "f:"); ok {
				out[key] = true
			}
		}
	}
	return out
}

// unchanged says whether the pod already carries exactly what this
// manager would apply (and nothing more of ours). Scrape annotations
// someone else set, which the operator neither applies nor owns, do not
// count: comparing them would re-apply on every reconcile.
func (r *PodReconciler) unchanged(pod *corev1.Pod, annotations, lbls map[string]string) bool {
	owned := annotationsAppliedByUs(pod)
	have := map[string]string{}
	for _, k := range []string{AnnotationState, AnnotationScrape, AnnotationPort, AnnotationPath} {
		_, want := annotations[k]
		if v, ok := pod.Annotations[k]; ok && (want || owned[k] || k == AnnotationState) {
			have[k] = v
		}
	}
	return maps.Equal(have, annotations) && pod.Labels[LabelExporter] == lbls[LabelExporter] &&
		(lbls[LabelExporter] != "" || !hasKey(pod.Labels, LabelExporter))
}

func hasKey(m map[string]string, k string) bool {
	_, ok := m[k]
	return ok
}

// release removes the exporter's label and scrape annotations from a pod
// no exporter selects any more. The state stays: the agent stays loaded
// in the JVM, and a later exporter must not load a second one.
func (r *PodReconciler) release(ctx context.Context, pod *corev1.Pod, st *podState) error {
	if st == nil || (st.Exporter == "" && pod.Labels[LabelExporter] == "") {
		return nil
	}
	was := st.Exporter
	next := *st
	next.Exporter, next.Serving = "", false
	if err := r.apply(ctx, pod, nil, &next); err != nil {
		return err
	}
	if st.loaded() && st.sameInstance(pod) {
		r.Recorder.Eventf(pod, nil, corev1.EventTypeNormal, "Released", "Release",
			"PrometheusJmxExporter %s no longer selects this pod: scrape annotations removed; the agent stays loaded in the JVM (a Java agent cannot be unloaded) until the container restarts", was)
	}
	return nil
}

// runningContainers are the pod's running containers, limited to names
// when given.
func runningContainers(pod *corev1.Pod, names []string) []string {
	var out []string
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.State.Running != nil && (len(names) == 0 || slices.Contains(names, cs.Name)) {
			out = append(out, cs.Name)
		}
	}
	return out
}

func containersNote(e *banzaiv1alpha1.PrometheusJmxExporter) string {
	if len(e.Spec.Containers) == 0 {
		return ""
	}
	return fmt.Sprintf(" (spec.containers: %v)", e.Spec.Containers)
}
