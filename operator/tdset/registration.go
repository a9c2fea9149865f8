package tdset

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	schedulev1 "github.com/deckhand-dev/deckhand/operator/apis/schedule/v1"
	"github.com/deckhand-dev/deckhand/operator/registration"
)

// Registration is how the registry knows TDSet. Its Deployments and
// Services carry deckhand's managed-by label, so only those are cached.
var Registration = registration.Controller{
	Name:        Name,
	ValuesKey:   "tdset",
	AddToScheme: schedulev1.AddToScheme,
	Owns:        []client.Object{&appsv1.Deployment{}, &corev1.Service{}},
	Setup:       func(mgr ctrl.Manager, _ registration.Settings) error { return Setup(mgr) },
}
