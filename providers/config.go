package providers

import (
	"fmt"
	"os"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// NewRestConfig loads the host cluster's config the way kubectl and
// controller-runtime do: the --kubeconfig file if given; else, when
// $KUBECONFIG is unset, the in-cluster service account; else $KUBECONFIG or
// ~/.kube/config.
func NewRestConfig(opts Options) (*rest.Config, error) {
	overrides := &clientcmd.ConfigOverrides{CurrentContext: opts.KubeContext}
	if opts.Kubeconfig != "" {
		cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
			&clientcmd.ClientConfigLoadingRules{ExplicitPath: opts.Kubeconfig}, overrides).ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("loading host kubeconfig %s: %w", opts.Kubeconfig, err)
		}
		return withDefaults(cfg, opts), nil
	}
	var inClusterErr error
	if os.Getenv(clientcmd.RecommendedConfigPathEnvVar) == "" {
		cfg, err := rest.InClusterConfig()
		if err == nil {
			return withDefaults(cfg, opts), nil
		}
		inClusterErr = err
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		clientcmd.NewDefaultClientConfigLoadingRules(), overrides).ClientConfig()
	if err != nil {
		if inClusterErr != nil {
			return nil, fmt.Errorf("no host cluster config: not in a cluster (%v), and no kubeconfig: %w (set --kubeconfig or $KUBECONFIG)", inClusterErr, err)
		}
		return nil, fmt.Errorf("loading host kubeconfig from $KUBECONFIG: %w", err)
	}
	return withDefaults(cfg, opts), nil
}

// withDefaults names the manager in its requests, sets its own request
// limits (see Options.HostAPIQPS) and asks for uncompressed responses: the
// host API server would otherwise gzip every watch event it sends the
// hub, which costs the host CPU on every synced object and the manager a
// decompressor per watch (see clusterregistry.Options.EnableCompression).
func withDefaults(cfg *rest.Config, opts Options) *rest.Config {
	if cfg.UserAgent == "" {
		cfg.UserAgent = rest.DefaultKubernetesUserAgent() + " tenantry-manager"
	}
	cfg.DisableCompression = true
	opts.Default()
	cfg.QPS, cfg.Burst = float32(opts.HostAPIQPS), opts.HostAPIBurst
	return cfg
}
