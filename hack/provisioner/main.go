// Command provisioner gives the local cluster what kind's local-path
// provisioner gives its users: a PersistentVolume for every claim of its
// StorageClasses (a hostPath directory under --root, on the node the
// scheduler picked), removed with the claim. It runs as a host process
// beside the kwok cluster (hack/cluster.sh starts it); kwok runs no
// containers, so the directories only stand for the volumes.
//
// For a StorageClass that allows volume expansion it also "resizes": a
// claim that asks for more gets the new capacity on its volume and in its
// status, as a CSI resizer and the kubelet would report it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Annotations of the PersistentVolume controller and the scheduler.
const (
	annStorageProvisioner = "volume.kubernetes.io/storage-provisioner"
	annSelectedNode       = "volume.kubernetes.io/selected-node"
	annProvisionedBy      = "pv.kubernetes.io/provisioned-by"
)

func main() {
	// --kubeconfig is controller-runtime's flag.
	root := flag.String("root", "", "directory holding one directory per volume")
	name := flag.String("name", "deckhand.dev/hostpath", "provisioner name, as StorageClasses name it")
	flag.Parse()
	ctrl.SetLogger(zap.New())
	if err := run(*root, *name); err != nil {
		fmt.Fprintln(os.Stderr, "provisioner:", err)
		os.Exit(1)
	}
}

func run(root, name string) error {
	if root == "" {
		return fmt.Errorf("--root is required")
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return err
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		return err
	}
	p := &provisioner{Client: mgr.GetClient(), root: root, name: name}
	if err := ctrl.NewControllerManagedBy(mgr).Named("claims").For(&corev1.PersistentVolumeClaim{}).Complete(reconcile.Func(p.reconcileClaim)); err != nil {
		return err
	}
	if err := ctrl.NewControllerManagedBy(mgr).Named("volumes").For(&corev1.PersistentVolume{}).Complete(reconcile.Func(p.reconcileVolume)); err != nil {
		return err
	}
	return mgr.Start(ctrl.SetupSignalHandler())
}

type provisioner struct {
	client.Client
	root, name string
}

// reconcileClaim provisions a volume for a pending claim of one of our
// StorageClasses, once the scheduler picked its node, and grows the volume
// of a bound claim that asks for more.
func (p *provisioner) reconcileClaim(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var pvc corev1.PersistentVolumeClaim
	if err := p.Get(ctx, req.NamespacedName, &pvc); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if pvc.Annotations[annStorageProvisioner] != p.name || !pvc.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	var class storagev1.StorageClass
	if err := p.Get(ctx, client.ObjectKey{Name: ptr.Deref(pvc.Spec.StorageClassName, "")}, &class); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if pvc.Spec.VolumeName != "" {
		return ctrl.Result{}, p.resize(ctx, &pvc, &class)
	}
	node := pvc.Annotations[annSelectedNode]
	if node == "" && ptr.Deref(class.VolumeBindingMode, storagev1.VolumeBindingImmediate) == storagev1.VolumeBindingWaitForFirstConsumer {
		return ctrl.Result{}, nil
	}
	pv := p.volumeFor(&pvc, &class, node)
	if err := makeVolumeDir(pv.Spec.HostPath.Path); err != nil {
		return ctrl.Result{}, err
	}
	if err := p.Create(ctx, pv); err != nil && !apierrors.IsAlreadyExists(err) {
		return ctrl.Result{}, err
	}
	ctrl.LoggerFrom(ctx).Info("provisioned", "volume", pv.Name, "node", node)
	return ctrl.Result{}, nil
}

// makeVolumeDir makes a volume's directory writable by every user, as
// kind's local-path provisioner does (mkdir -m 0777): a hostPath volume
// ignores the pod's fsGroup, and servers such as PostgreSQL (UID 999) run
// as users of their own, which make their data directory inside with the
// mode they need. Chmod after MkdirAll: the umask would clear bits.
func makeVolumeDir(path string) error {
	if err := os.MkdirAll(path, 0o777); err != nil {
		return err
	}
	return os.Chmod(path, 0o777)
}

func (p *provisioner) volumeFor(pvc *corev1.PersistentVolumeClaim, class *storagev1.StorageClass, node string) *corev1.PersistentVolume {
	name := "pvc-" + string(pvc.UID)
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{annProvisionedBy: p.name}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: pvc.Spec.Resources.Requests[corev1.ResourceStorage]},
			AccessModes:                   pvc.Spec.AccessModes,
			PersistentVolumeReclaimPolicy: ptr.Deref(class.ReclaimPolicy, corev1.PersistentVolumeReclaimDelete),
			StorageClassName:              class.Name,
			VolumeMode:                    pvc.Spec.VolumeMode,
			ClaimRef: &corev1.ObjectReference{
				APIVersion: "v1", Kind: "PersistentVolumeClaim",
				Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID,
			},
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{
				Path: filepath.Join(p.root, name), Type: ptr.To(corev1.HostPathDirectoryOrCreate),
			}},
		},
	}
	if node != "" {
		pv.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
		}}}}
	}
	return pv
}

// resize reports a bigger claim as resized, for classes that allow it.
func (p *provisioner) resize(ctx context.Context, pvc *corev1.PersistentVolumeClaim, class *storagev1.StorageClass) error {
	want := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	if !ptr.Deref(class.AllowVolumeExpansion, false) || pvc.Status.Phase != corev1.ClaimBound {
		return nil
	}
	var pv corev1.PersistentVolume
	if err := p.Get(ctx, client.ObjectKey{Name: pvc.Spec.VolumeName}, &pv); err != nil {
		return client.IgnoreNotFound(err)
	}
	if pv.Annotations[annProvisionedBy] != p.name {
		return nil
	}
	if have := pv.Spec.Capacity[corev1.ResourceStorage]; have.Cmp(want) < 0 {
		patch := client.MergeFrom(pv.DeepCopy())
		pv.Spec.Capacity[corev1.ResourceStorage] = want
		if err := p.Patch(ctx, &pv, patch); err != nil {
			return err
		}
	}
	if have := pvc.Status.Capacity[corev1.ResourceStorage]; have.Cmp(want) < 0 {
		patch := client.MergeFrom(pvc.DeepCopy())
		if pvc.Status.Capacity == nil {
			pvc.Status.Capacity = corev1.ResourceList{}
		}
		pvc.Status.Capacity[corev1.ResourceStorage] = want
		if err := p.Status().Patch(ctx, pvc, patch); err != nil {
			return err
		}
		ctrl.LoggerFrom(ctx).Info("resized", "claim", pvc.Namespace+"/"+pvc.Name, "capacity", want.String())
	}
	return nil
}

// reconcileVolume deletes a released volume of ours whose class says
// Delete, with its directory.
func (p *provisioner) reconcileVolume(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var pv corev1.PersistentVolume
	if err := p.Get(ctx, req.NamespacedName, &pv); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if pv.Annotations[annProvisionedBy] != p.name || pv.Status.Phase != corev1.VolumeReleased ||
		pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete {
		return ctrl.Result{}, nil
	}
	if hp := pv.Spec.HostPath; hp != nil && filepath.Dir(hp.Path) == filepath.Clean(p.root) {
		if err := os.RemoveAll(hp.Path); err != nil {
			return ctrl.Result{}, err
		}
	}
	if err := p.Delete(ctx, &pv); client.IgnoreNotFound(err) != nil {
		return ctrl.Result{}, err
	}
	ctrl.LoggerFrom(ctx).Info("deleted", "volume", pv.Name)
	return ctrl.Result{}, nil
}
