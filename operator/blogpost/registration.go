package blogpost

import (
	ctrl "sigs.k8s.io/controller-runtime"

	iximiuzv1alpha1 "github.com/deckhand-dev/deckhand/operator/apis/iximiuz/v1alpha1"
	"github.com/deckhand-dev/deckhand/operator/registration"
)

// Registration is how the registry knows BlogPost.
var Registration = registration.Controller{
	Name:        Name,
	ValuesKey:   "blogPost",
	AddToScheme: iximiuzv1alpha1.AddToScheme,
	Setup:       func(mgr ctrl.Manager, _ registration.Settings) error { return Setup(mgr) },
}
