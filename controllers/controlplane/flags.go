package controlplane

import (
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"

	corev1 "k8s.io/api/core/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"sigs.k8s.io/yaml"

	"github.com/tenantry/tenantry/pkg/controlplane"
	"github.com/tenantry/tenantry/pkg/controlplane/activity"
	"github.com/tenantry/tenantry/pkg/controlplane/waker"
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
	fs.StringVar(&o.EtcdImage, "control-plane-etcd-image", def.EtcdImage, "Image of the etcd of provisioned control planes (storage Embedded and Etcd).")
	fs.Func("control-plane-resources", "A YAML file of the requests and limits of provisioned control planes' components unless a VirtualCluster says otherwise: apiServer, controllerManager and etcd, each a container's resources (a component left out keeps the built-in default).",
		func(path string) error {
			r, err := readResources(path)
			if err != nil {
				return err
			}
			o.Resources = r
			return nil
		})
	fs.IntVar(&o.MaxConcurrentReconciles, "control-plane-concurrency", DefaultMaxConcurrentReconciles,
		"Control planes reconciled at once.")
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
	fs.Func("control-plane-wake-address", "IP of this replica that the host's nodes reach, where a sleeping control plane's API server is answered, so that a request wakes it (default: $POD_IP, else this machine's default-route address).",
		func(v string) error {
			if net.ParseIP(v) == nil {
				return fmt.Errorf("%q is not an IP", v)
			}
			o.WakeAddress = v
			return nil
		})
	fs.DurationVar(&o.WakeHoldTimeout, "control-plane-wake-timeout", waker.DefaultHoldTimeout,
		"How long a request to a sleeping control plane is held while it wakes, at most (the request's own timeout may be shorter).")
	fs.StringVar(&o.ActivityBindAddress, "control-plane-activity-bind-address", activity.DefaultBindAddress,
		`Address (host:port) where the API servers of control planes with spec.sleep report their requests, which tell when people last used them; "0" takes no report, and spec.sleep.afterInactivity is then not acted on.`)
	fs.Func("control-plane-activity-url", "URL (https://HOST:PORT) at which those API servers reach --control-plane-activity-bind-address: a Service in front of the manager's replicas (default: the bound address, with --control-plane-wake-address as its host when it binds every interface).",
		func(v string) error {
			u, err := url.Parse(v)
			if err != nil || u.Scheme != "https" || u.Host == "" || u.Path != "" {
				return fmt.Errorf("%q is not https://HOST:PORT", v)
			}
			o.ActivityURL = v
			return nil
		})
}

// wakeAddress is this replica's address for the Waker: WakeAddress, else
// the Pod's, else the machine's default-route address.
func (o Options) wakeAddress() (string, error) {
	if o.WakeAddress != "" {
		return o.WakeAddress, nil
	}
	if ip := os.Getenv("POD_IP"); ip != "" {
		return ip, nil
	}
	ip, err := utilnet.ChooseHostInterface()
	if err != nil {
		return "", fmt.Errorf("control planes: no --control-plane-wake-address given and none found: %w", err)
	}
	return ip.String(), nil
}

// readResources reads a --control-plane-resources file over the built-in
// defaults: a component it leaves out keeps them.
func readResources(path string) (*controlplane.Resources, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var set struct {
		APIServer         *corev1.ResourceRequirements `json:"apiServer"`
		ControllerManager *corev1.ResourceRequirements `json:"controllerManager"`
		Etcd              *corev1.ResourceRequirements `json:"etcd"`
	}
	if err := yaml.UnmarshalStrict(data, &set); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	r := controlplane.DefaultResources()
	for _, c := range []struct {
		set  *corev1.ResourceRequirements
		into *corev1.ResourceRequirements
	}{{set.APIServer, &r.APIServer}, {set.ControllerManager, &r.ControllerManager}, {set.Etcd, &r.Etcd}} {
		if c.set != nil {
			*c.into = *c.set
		}
	}
	return &r, nil
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
