// Package jmxexporter is the PrometheusJmxExporter controller (seed 003):
// for each running pod an exporter selects, it copies the Prometheus JMX
// exporter agent, its configuration and a small attach helper into the
// container, loads the agent into the running JVM (HotSpot dynamic attach,
// done by the helper, cmd/deckhand-jmx-attach), checks that metrics
// answer, and annotates the pod for scraping.
//
// Two reconcilers share the package: one per pod does the work and keeps
// its memory on the pod (AnnotationState), so nothing is attached twice
// and a restarted container is attached again; one per exporter
// summarises the pods in its status. Pods and ConfigMaps are watched as
// metadata only and read live when needed: the operator never holds every
// pod of the cluster in memory.
package jmxexporter

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	banzaiv1alpha1 "github.com/deckhand-dev/deckhand/operator/apis/banzaicloud/v1alpha1"
)

// Name is the controller's name in --controllers.
const Name = "jmxexporter"

// FieldManager owns the pod annotations and label the controller writes.
const FieldManager = "deckhand-jmxexporter"

// Condition types.
const (
	ConditionReady       = "Ready"
	ConditionConfigFound = "ConfigFound"
	// ConditionConfigValid: the configuration passes the agent's own
	// checks (jvm.CheckAgentConfig); a refused one is never copied.
	ConditionConfigValid = "ConfigValid"
)

// DefaultTargetDir is where the helper, agent and configuration go inside
// the container: /tmp is writable in most images, and HotSpot's attach
// socket lives there anyway.
const DefaultTargetDir = "/tmp/deckhand-jmx"

const indexConfigMap = "prometheusjmxexporter.spec.config.configMapName"

// +kubebuilder:rbac:groups=banzaicloud.com,resources=prometheusjmxexporters,verbs=get;list;watch
// +kubebuilder:rbac:groups=banzaicloud.com,resources=prometheusjmxexporters/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups="",resources=pods/exec,verbs=get;create
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Options are the controller's settings.
type Options struct {
	// HelperPath is the attach helper binary; "{arch}" in it is replaced
	// by the container's architecture (amd64, arm64).
	HelperPath string
	// AgentJar is the jmx_prometheus_javaagent jar.
	AgentJar string
	// TargetDir is the directory inside containers (default
	// DefaultTargetDir).
	TargetDir string
	// Namespaces, when set, limits this controller (its caches and so its
	// RBAC needs) to these namespaces, whatever the operator watches.
	Namespaces []string
	// Executor runs commands in containers; nil means exec through the
	// API server.
	Executor Executor
}

// Setup registers the PrometheusJmxExporter controllers with the manager.
func Setup(mgr ctrl.Manager, o Options) error {
	if o.TargetDir == "" {
		o.TargetDir = DefaultTargetDir
	}
	c, err := controllerCache(mgr, o.Namespaces)
	if err != nil {
		return err
	}
	if o.Executor == nil {
		cs, err := kubernetes.NewForConfig(mgr.GetConfig())
		if err != nil {
			return err
		}
		o.Executor = &PodExecutor{Config: mgr.GetConfig(), Clientset: cs}
	}
	if err := c.IndexField(context.Background(), &banzaiv1alpha1.PrometheusJmxExporter{}, indexConfigMap, func(obj client.Object) []string {
		return []string{obj.(*banzaiv1alpha1.PrometheusJmxExporter).Spec.Config.ConfigMapName}
	}); err != nil {
		return err
	}
	recorder := mgr.GetEventRecorder("deckhand-" + Name)
	w := &watches{cache: c}
	pods := &PodReconciler{
		Client: mgr.GetClient(), Cache: c, Reader: mgr.GetAPIReader(), Exec: o.Executor, Recorder: recorder,
		Files: &artifacts{helperPath: o.HelperPath, agentPath: o.AgentJar}, TargetDir: o.TargetDir, Now: time.Now,
	}
	if err := ctrl.NewControllerManagedBy(mgr).
		Named(Name + "-pods").
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		WatchesRawSource(source.Kind[client.Object](c, podMetadata(), handler.EnqueueRequestsFromMapFunc(w.podItself))).
		WatchesRawSource(source.Kind[client.Object](c, &banzaiv1alpha1.PrometheusJmxExporter{}, handler.EnqueueRequestsFromMapFunc(w.podsOfExporter))).
		WatchesRawSource(source.Kind[client.Object](c, configMapMetadata(), handler.EnqueueRequestsFromMapFunc(w.podsOfConfigMap))).
		Complete(pods); err != nil {
		return err
	}
	exporters := &ExporterReconciler{Client: mgr.GetClient(), Cache: c, Reader: mgr.GetAPIReader(), Files: pods.Files, Recorder: recorder}
	return ctrl.NewControllerManagedBy(mgr).
		Named(Name).
		WatchesRawSource(source.Kind[client.Object](c, &banzaiv1alpha1.PrometheusJmxExporter{}, &handler.EnqueueRequestForObject{})).
		WatchesRawSource(source.Kind[client.Object](c, podMetadata(), handler.EnqueueRequestsFromMapFunc(w.exportersOfPod))).
		WatchesRawSource(source.Kind[client.Object](c, configMapMetadata(), handler.EnqueueRequestsFromMapFunc(w.exportersOfConfigMap))).
		Complete(exporters)
}

// controllerCache is the manager's cache, or, when the controller is
// limited to some namespaces, a cache of its own over just those, so the
// operator needs its rights there only.
func controllerCache(mgr ctrl.Manager, namespaces []string) (cache.Cache, error) {
	if len(namespaces) == 0 {
		return mgr.GetCache(), nil
	}
	opts := cache.Options{
		Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(), HTTPClient: mgr.GetHTTPClient(),
		DefaultNamespaces: map[string]cache.Config{},
		DefaultTransform: func(in any) (any, error) {
			if obj, ok := in.(metav1.Object); ok {
				obj.SetManagedFields(nil)
			}
			return in, nil
		},
	}
	for _, ns := range namespaces {
		opts.DefaultNamespaces[ns] = cache.Config{}
	}
	c, err := cache.New(mgr.GetConfig(), opts)
	if err != nil {
		return nil, err
	}
	return c, mgr.Add(c)
}

func podMetadata() *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Pod"))
	return m
}

func configMapMetadata() *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	return m
}

// watches maps events to the pods and exporters they concern, from the
// cache (exporters in full, pods and ConfigMaps as metadata).
type watches struct {
	cache cache.Cache
}

func (w *watches) exporters(ctx context.Context, ns string, opts ...client.ListOption) []banzaiv1alpha1.PrometheusJmxExporter {
	var list banzaiv1alpha1.PrometheusJmxExporterList
	if err := w.cache.List(ctx, &list, append(opts, client.InNamespace(ns))...); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing PrometheusJmxExporters", "namespace", ns)
		return nil
	}
	return list.Items
}

// selecting are the exporters selecting the pod, or named by its label.
func (w *watches) selecting(ctx context.Context, pod client.Object) []banzaiv1alpha1.PrometheusJmxExporter {
	var out []banzaiv1alpha1.PrometheusJmxExporter
	for _, e := range w.exporters(ctx, pod.GetNamespace()) {
		if selects(&e, pod.GetLabels()) || pod.GetLabels()[LabelExporter] == e.Name {
			out = append(out, e)
		}
	}
	return out
}

func (w *watches) podItself(ctx context.Context, pod client.Object) []reconcile.Request {
	if pod.GetLabels()[LabelExporter] == "" && len(w.selecting(ctx, pod)) == 0 {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKeyFromObject(pod)}}
}

// podsOfExporter are the pods an exporter selects and those it served.
func (w *watches) podsOfExporter(ctx context.Context, obj client.Object) []reconcile.Request {
	e := obj.(*banzaiv1alpha1.PrometheusJmxExporter)
	seen := map[client.ObjectKey]bool{}
	var reqs []reconcile.Request
	for _, sel := range []labels.Set{e.Spec.LabelSelector, {LabelExporter: e.Name}} {
		if len(sel) == 0 {
			continue
		}
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
		if err := w.cache.List(ctx, list, client.InNamespace(e.Namespace), client.MatchingLabels(sel)); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "listing pods", "namespace", e.Namespace)
			continue
		}
		for _, p := range list.Items {
			if key := client.ObjectKeyFromObject(&p); !seen[key] {
				seen[key] = true
				reqs = append(reqs, reconcile.Request{NamespacedName: key})
			}
		}
	}
	return reqs
}

func (w *watches) exportersNaming(ctx context.Context, cm client.Object) []banzaiv1alpha1.PrometheusJmxExporter {
	return w.exporters(ctx, cm.GetNamespace(), client.MatchingFields{indexConfigMap: cm.GetName()})
}

func (w *watches) podsOfConfigMap(ctx context.Context, cm client.Object) []reconcile.Request {
	var reqs []reconcile.Request
	for _, e := range w.exportersNaming(ctx, cm) {
		reqs = append(reqs, w.podsOfExporter(ctx, &e)...)
	}
	return reqs
}

func (w *watches) exportersOfPod(ctx context.Context, pod client.Object) []reconcile.Request {
	return requests(w.selecting(ctx, pod))
}

func (w *watches) exportersOfConfigMap(ctx context.Context, cm client.Object) []reconcile.Request {
	return requests(w.exportersNaming(ctx, cm))
}

func requests(exporters []banzaiv1alpha1.PrometheusJmxExporter) []reconcile.Request {
	reqs := make([]reconcile.Request, 0, len(exporters))
	for _, e := range exporters {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&e)})
	}
	return reqs
}

func selects(e *banzaiv1alpha1.PrometheusJmxExporter, podLabels map[string]string) bool {
	return e.DeletionTimestamp.IsZero() && len(e.Spec.LabelSelector) > 0 &&
		labels.SelectorFromSet(e.Spec.LabelSelector).Matches(labels.Set(podLabels))
}

// artifacts are the files the operator copies into containers, read once.
type artifacts struct {
	helperPath, agentPath string
	mu                    sync.Mutex
	read                  map[string]file
}

func (a *artifacts) load(name, path, mode string) (file, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if f, ok := a.read[path]; ok {
		return f, nil
	}
	if path == "" {
		return file{}, fmt.Errorf("no path configured for %s", name)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return file{}, err
	}
	if a.read == nil {
		a.read = map[string]file{}
	}
	f := newFile(name, data, mode)
	a.read[path] = f
	return f, nil
}

func (a *artifacts) helper(arch string) (file, error) {
	return a.load(helperName, strings.ReplaceAll(a.helperPath, "{arch}", arch), "0755")
}

func (a *artifacts) agent() (file, error) { return a.load(agentName, a.agentPath, "0644") }
