package syncers

import (
	"slices"
	"testing"

	"go.uber.org/fx"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/tenantry/tenantry/pkg/syncer"
)

// Syncers added with Provide reach TenantParams.Extra, which
// NewTenantModule runs in every tenant beside the built-in ones; one built
// from the management app's own objects included.
func TestProvideAddsSyncers(t *testing.T) {
	type prefix string
	var got []string
	app := fx.New(fx.NopLogger,
		fx.Supply(prefix("made-by-")),
		fx.Provide(func() *syncer.Hub { return nil }, func() manager.Manager { return nil }),
		Provide(func() syncer.Syncer { return syncer.Syncer{Name: "plain"} }),
		Provide(func(p prefix) syncer.Syncer { return syncer.Syncer{Name: string(p) + "the-app"} }),
		fx.Invoke(func(p TenantParams) {
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
