package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/cmd/internal/cli"
	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
)

var createCommand = cli.Command{
	Name:  "create",
	Args:  "NAME",
	NArgs: 1,
	Summary: "Create a tenant cluster whose control plane Tenantry runs in the host: a VirtualCluster NAME with spec.controlPlane, " +
		"its kubeconfig written by Tenantry to the Secret NAME-kubeconfig (applied server-side, so running it again updates it); " +
		"with --wait, wait until it is Ready or say why not. Then 'tenantry connect NAME'.",
	Flags: func(fs *flag.FlagSet) func(context.Context, cli.Invocation) error {
		var host hostFlags
		host.bind(fs)
		namespace := fs.String("namespace", "default", "Host namespace of the kubeconfig Secret, NAME-kubeconfig.")
		version := fs.String("version", "", "Kubernetes version of the control plane, as v1.37.2 (default: the manager's).")
		var storage storageFlags
		storage.bind(fs, "Embedded")
		retain := fs.Bool("retain-data", false, "Keep the control plane's data when the VirtualCluster is deleted.")
		wait := fs.Bool("wait", false, "Wait until the VirtualCluster is Ready; if it is not within --timeout, print its reason and fail.")
		timeout := fs.Duration("timeout", 5*time.Minute, "How long --wait waits.")
		return func(ctx context.Context, in cli.Invocation) error {
			name := in.Args[0]
			if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
				return fmt.Errorf("NAME %q is not a VirtualCluster name: %s", name, strings.Join(errs, "; "))
			}
			cp := &tenantryv1alpha1.ControlPlaneSpec{Version: *version, RetainData: *retain}
			var err error
			if cp.Storage, err = storage.parse(); err != nil {
				return err
			}
			c, err := host.client()
			if err != nil {
				return err
			}
			vc := &tenantryv1alpha1.VirtualCluster{
				TypeMeta:   metav1.TypeMeta{APIVersion: tenantryv1alpha1.GroupVersion.String(), Kind: "VirtualCluster"},
				ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec: tenantryv1alpha1.VirtualClusterSpec{
					KubeconfigSecretRef: tenantryv1alpha1.SecretKeyReference{Namespace: *namespace, Name: name + "-kubeconfig", Key: tenantryv1alpha1.DefaultKubeconfigKey},
					ControlPlane:        cp,
				},
			}
			if err := c.Patch(ctx, vc, client.Apply, fieldOwner, client.ForceOwnership); err != nil {
				return fmt.Errorf("applying VirtualCluster %s: %w", name, err)
			}
			fmt.Fprintf(in.Out, "virtualcluster/%s created (Tenantry writes its kubeconfig to secret %s/%s-kubeconfig)\n", name, *namespace, name)
			if !*wait {
				return nil
			}
			vc, err = waitReady(ctx, c, name, *timeout)
			if err != nil {
				return err
			}
			fmt.Fprintf(in.Out, "virtualcluster/%s is Ready: its control plane runs Kubernetes %s; 'tenantry connect %s' reaches it\n", name, vc.Status.ControlPlane.Version, name)
			return nil
		}
	},
}
