package managerapp

import (
	"testing"

	"go.uber.org/fx"

	"github.com/tenantry/tenantry/providers"
)

// The app's graph is whole, sharded or not: every constructor finds what
// it asks for, and every annotation is one fx accepts. Nothing is built.
func TestAppGraph(t *testing.T) {
	for _, mode := range []string{providers.ShardModeNone, providers.ShardModeLease} {
		t.Run(mode, func(t *testing.T) {
			var opts Options
			opts.ShardMode = mode
			if err := fx.ValidateApp(App(opts), fx.NopLogger); err != nil {
				t.Fatal(err)
			}
		})
	}
}
