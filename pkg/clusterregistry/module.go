package clusterregistry

import "go.uber.org/fx"

// ModuleGroup is the fx value group from which the management app collects
// the modules that it hands to its registry: `group:"tenant-modules"`.
const ModuleGroup = "tenant-modules"

// AsTenantModule contributes module to ModuleGroup, so that an app which
// builds its registry from that group (as Tenantry's providers do) runs the
// module in every spawned cluster. Adding a tenant reconciler to the
// controller-manager is adding one such option to its app.
func AsTenantModule(module fx.Option) fx.Option {
	return fx.Provide(fx.Annotate(
		func() fx.Option { return module },
		fx.ResultTags(`group:"`+ModuleGroup+`"`),
	))
}
