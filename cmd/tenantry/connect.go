package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/cmd/internal/cli"
	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
	"github.com/tenantry/tenantry/pkg/controlplane"
)

var connectCommand = cli.Command{
	Name:  "connect",
	Args:  "NAME",
	NArgs: 1,
	Summary: "Write a kubeconfig for tenant cluster NAME (its admin credential) to --out. For a control plane Tenantry runs, " +
		"forward a local port to its API server through the host (as kubectl port-forward does) until interrupted, and point the kubeconfig there (a sleeping one is woken); " +
		"with --no-forward, point it at the API server's Service, which Pods of the host reach.",
	Flags: func(fs *flag.FlagSet) func(context.Context, cli.Invocation) error {
		var host hostFlags
		host.bind(fs)
		out := fs.String("out", "", "File to write the kubeconfig to, mode 0600 (default: NAME.kubeconfig).")
		port := fs.Int("port", 0, "Local port to forward (default: a free one).")
		noForward := fs.Bool("no-forward", false, "Write the kubeconfig and return, without forwarding a port.")
		return func(ctx context.Context, in cli.Invocation) error {
			name := in.Args[0]
			if *out == "" {
				*out = name + ".kubeconfig"
			}
			cfg, c, vc, err := host.virtualCluster(ctx, name)
			if err != nil {
				return err
			}
			kubeconfig, err := readTenantKubeconfig(ctx, c, vc)
			if err != nil {
				return err
			}
			if vc.Spec.ControlPlane == nil || *noForward {
				if err := os.WriteFile(*out, kubeconfig, 0o600); err != nil {
					return err
				}
				fmt.Fprintf(in.Out, "wrote %s: export KUBECONFIG=%s\n", *out, *out)
				return nil
			}
			if vc.Asleep() {
				fmt.Fprintf(in.Out, "virtualcluster/%s sleeps: waking it\n", name)
			}
			return forward(ctx, in.Out, cfg, vc, kubeconfig, *out, *port)
		}
	},
}

// readTenantKubeconfig reads the kubeconfig that vc's Secret holds.
func readTenantKubeconfig(ctx context.Context, c client.Client, vc *tenantryv1alpha1.VirtualCluster) ([]byte, error) {
	ref := vc.Spec.KubeconfigSecretRef
	var secret corev1.Secret
	if err := c.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, &secret); err != nil {
		return nil, fmt.Errorf("reading virtualcluster/%s's kubeconfig Secret %s/%s (is its control plane up? see 'tenantry list'): %w", vc.Name, ref.Namespace, ref.Name, err)
	}
	data := secret.Data[ref.KubeconfigKey()]
	if len(data) == 0 {
		return nil, fmt.Errorf("secret %s/%s has no key %s", ref.Namespace, ref.Name, ref.KubeconfigKey())
	}
	return data, nil
}

// forward forwards a local port to the API server of vc's control plane,
// writes kubeconfig pointed there to file, and keeps forwarding until ctx
// ends.
func forward(ctx context.Context, out io.Writer, cfg *rest.Config, vc *tenantryv1alpha1.VirtualCluster, kubeconfig []byte, file string, port int) error {
	server, done, err := controlplane.Forward(ctx, cfg, vc.Name, port)
	if err != nil {
		return err
	}
	if err := writePointedAt(kubeconfig, server, file); err != nil {
		return err
	}
	fmt.Fprintf(out, "forwarding %s to virtualcluster/%s's API server; wrote %s: export KUBECONFIG=%s (Ctrl-C stops)\n", server, vc.Name, file, file)
	return <-done
}

// writePointedAt writes kubeconfig to file, its current cluster's server
// set to server (the API server's certificate names 127.0.0.1).
func writePointedAt(kubeconfig []byte, server, file string) error {
	config, err := clientcmd.Load(kubeconfig)
	if err != nil {
		return fmt.Errorf("reading the tenant's kubeconfig: %w", err)
	}
	ctx := config.Contexts[config.CurrentContext]
	if ctx == nil || config.Clusters[ctx.Cluster] == nil {
		return errors.New("the tenant's kubeconfig has no current cluster")
	}
	config.Clusters[ctx.Cluster].Server = server
	return clientcmd.WriteToFile(*config, file)
}
