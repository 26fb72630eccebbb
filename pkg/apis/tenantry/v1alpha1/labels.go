package v1alpha1

// The labels that Tenantry puts on the host objects it makes
// (ARCHITECTURE.md, "Sync model"): here, below every package that makes
// or selects such objects (the syncers, the control planes), which share
// them without importing one another.
const (
	// LabelManagedBy marks an object as Tenantry's; nothing without it is
	// ever changed or deleted in the host.
	LabelManagedBy = "tenantry.dev/managed-by"
	// ManagedByValue is LabelManagedBy's value.
	ManagedByValue = "tenantry"
	// LabelCluster names the VirtualCluster an object belongs to; host
	// events are routed to tenants by it.
	LabelCluster = "tenantry.dev/cluster"
	// LabelControlPlane names the VirtualCluster whose control plane an
	// object is part of, where Tenantry runs it (spec.controlPlane): the
	// platform's, never a copy of the tenant's, nor in its budget.
	LabelControlPlane = "tenantry.dev/control-plane"
)
