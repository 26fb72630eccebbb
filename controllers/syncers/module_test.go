package syncers

import (
	"slices"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"go.uber.org/fx"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/tenantry/tenantry/pkg/clusterregistry"
	"github.com/tenantry/tenantry/pkg/syncer"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

// Syncers added with Provide reach the tenant half, which runs them in
// every tenant beside the built-in ones; one built from the management
// app's own objects included.
func TestProvideAddsSyncers(t *testing.T) {
	type prefix string
	var got []string
	app := fx.New(fx.NopLogger,
		fx.Supply(prefix("made-by-")),
		fx.Provide(func() *syncer.Hub { return nil }, func() manager.Manager { return nil }),
		Provide(func() syncer.Syncer { return syncer.Syncer{Name: "plain"} }),
		Provide(func(p prefix) syncer.Syncer { return syncer.Syncer{Name: string(p) + "the-app"} }),
		fx.Invoke(func(p tenantParams) {
			for _, s := range p.Extra {
				got = append(got, s.Name)
			}
		}),
	)
	if err := app.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if want := []string{"made-by-the-app", "plain"}; !slices.Equal(got, want) {
		t.Fatalf("extra syncers %v, want %v", got, want)
	}
}

// addRecorder is a management manager that records what is added to it.
type addRecorder struct {
	manager.Manager
	added []manager.Runnable
}

func (m *addRecorder) Add(r manager.Runnable) error {
	m.added = append(m.added, r)
	return nil
}

// Module runs the Hub only once the registry runs the tenant half: an app
// that leaves it out, and would sync no tenant, fails to build, saying
// what to add.
func TestModuleNeedsItsTenantHalf(t *testing.T) {
	env := tenantrytest.New(t, tenantrytest.Options{})
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	const group = `group:"tenant-modules"`
	for _, given := range []bool{true, false} {
		mgr := &addRecorder{}
		tenantHalf := fx.Options()
		if given {
			tenantHalf = fx.Provide(fx.Annotate(TenantModule, fx.ResultTags(group)))
		}
		app := fx.New(fx.NopLogger,
			fx.Supply(env.Host.Config(), scheme),
			fx.Provide(func() manager.Manager { return mgr }),
			fx.Provide(fx.Annotate(func(modules []fx.Option) *clusterregistry.RemoteClusterRegistry {
				return clusterregistry.New(logr.Discard(), nil, modules...)
			}, fx.ParamTags(group))),
			Module,
			tenantHalf,
		)
		err := app.Err()
		switch {
		case given && (err != nil || len(mgr.added) != 2):
			t.Errorf("with the tenant half: %v, %d runnables added, want the Hub and the node heartbeat", err, len(mgr.added))
		case !given && (err == nil || !strings.Contains(err.Error(), "providers.ProvideTenantModule(syncers.TenantModule)") || len(mgr.added) != 0):
			t.Errorf("without the tenant half: %v, %d runnables added; want an error naming what to add, and nothing run", err, len(mgr.added))
		}
	}
}
