package controlplane

import (
	"flag"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/tenantry/tenantry/pkg/controlplane"
)

// DefaultOptions run the pinned releases, and let in the manager's own
// namespace ($POD_NAMESPACE).
func DefaultOptions() Options {
	return Options{Version: controlplane.PinnedVersion, EtcdImage: controlplane.PinnedEtcdImage, ManagerNamespace: os.Getenv("POD_NAMESPACE")}
}

// BindFlags registers the controller's flags on fs, with their defaults
// (DefaultOptions).
func (o *Options) BindFlags(fs *flag.FlagSet) {
	def := DefaultOptions()
	fs.StringVar(&o.Version, "control-plane-version", def.Version,
		"Kubernetes release of the control planes Tenantry runs for VirtualClusters with spec.controlPlane, unless one says otherwise; empty turns provisioning off.")
	fs.Func("control-plane-versions", "Comma-separated further releases a VirtualCluster's spec.controlPlane.version may name (the host must be able to pull their kube-apiserver and kube-controller-manager images).",
		func(v string) error {
			o.Versions = splitList(v)
			return nil
		})
	fs.StringVar(&o.EtcdImage, "control-plane-etcd-image", def.EtcdImage, "Image of the etcd embedded in provisioned control planes.")
	fs.StringVar(&o.ManagerNamespace, "control-plane-manager-namespace", def.ManagerNamespace,
		"Namespace of the manager's Pods, let in to provisioned control planes (default: $POD_NAMESPACE).")
	fs.Func("control-plane-manager-cidrs", "Comma-separated CIDRs from which the manager reaches provisioned control planes, when it runs outside the host's Pod network.",
		func(v string) error {
			o.ManagerCIDRs = splitList(v)
			for _, cidr := range o.ManagerCIDRs {
				if _, _, err := net.ParseCIDR(cidr); err != nil {
					return fmt.Errorf("%q is not a CIDR: %w", cidr, err)
				}
			}
			return nil
		})
}

func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
