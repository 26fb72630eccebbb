// Package foo is the example of a custom-resource syncer: Foos that tenants
// create run in the host, and the host reports how many replicas it
// observes. The Foo CRD is public in the host (labelled
// tenancy.x-k8s.io/super.public: "true"), so Tenantry copies it into every
// tenant; the syncer starts in a tenant as soon as the CRD is there.
package foo

import (
	"go.uber.org/fx"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/controllers/syncers"
	foov1alpha1 "github.com/tenantry/tenantry/examples/foo/api/v1alpha1"
	"github.com/tenantry/tenantry/pkg/syncer"
)

// Syncer syncs Foos: the spec goes down, the status comes up.
func Syncer() syncer.Syncer {
	return syncer.Syncer{
		Name:             "foos",
		Object:           func() client.Object { return &foov1alpha1.Foo{} },
		CopyUserMetadata: true,
		Down: func(t, h client.Object) error {
			h.(*foov1alpha1.Foo).Spec = *t.(*foov1alpha1.Foo).Spec.DeepCopy()
			return nil
		},
		Up: syncer.StatusUp(syncer.CopyStatus(func(f *foov1alpha1.Foo) *foov1alpha1.FooStatus { return &f.Status })),
	}
}

// Module adds the Foo syncer to the controller-manager's syncers; the app's
// scheme must know Foo.
var Module = fx.Module("foo-syncer", syncers.Provide(Syncer))
