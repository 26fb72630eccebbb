package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/cmd/internal/cli"
	"github.com/tenantry/tenantry/controllers/virtualcluster"
	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
	"github.com/tenantry/tenantry/providers"
)

// fieldOwner is the field manager of the CLI's server-side applies.
const fieldOwner = client.FieldOwner("tenantry-cli")

// hostFlags are how the operator verbs reach the host cluster.
type hostFlags struct {
	kubeconfig string
	context    string
}

func (h *hostFlags) bind(fs *flag.FlagSet) {
	fs.StringVar(&h.kubeconfig, "host-kubeconfig", "", "Kubeconfig of the host (management) cluster. Default: $KUBECONFIG, else ~/.kube/config.")
	fs.StringVar(&h.context, "host-context", "", "Context of --host-kubeconfig (default: its current context).")
}

// config is the host's client configuration.
func (h *hostFlags) config() (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = h.kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: h.context}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("the host cluster's kubeconfig: %w", err)
	}
	return cfg, nil
}

// client is a client of the host, with Tenantry's types.
func (h *hostFlags) client() (client.Client, error) {
	cfg, err := h.config()
	if err != nil {
		return nil, err
	}
	scheme, err := providers.NewScheme()
	if err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("a client of the host cluster: %w", err)
	}
	return c, nil
}

// virtualCluster is the host's configuration and client, and the
// VirtualCluster name read through them.
func (h *hostFlags) virtualCluster(ctx context.Context, name string) (*rest.Config, client.Client, *tenantryv1alpha1.VirtualCluster, error) {
	cfg, err := h.config()
	if err != nil {
		return nil, nil, nil, err
	}
	c, err := h.client()
	if err != nil {
		return nil, nil, nil, err
	}
	vc := &tenantryv1alpha1.VirtualCluster{}
	if err := c.Get(ctx, client.ObjectKey{Name: name}, vc); err != nil {
		return nil, nil, nil, fmt.Errorf("reading virtualcluster/%s: %w", name, err)
	}
	return cfg, c, vc, nil
}

var registerCommand = cli.Command{
	Name:  "register",
	Args:  "NAME",
	NArgs: 1,
	Summary: "Register a tenant cluster: write its kubeconfig into a Secret of the host and a VirtualCluster NAME naming it " +
		"(both applied server-side, so running it again updates them); with --wait, wait until it is Ready or say why not.",
	Flags: func(fs *flag.FlagSet) func(context.Context, cli.Invocation) error {
		var host hostFlags
		host.bind(fs)
		kubeconfig := fs.String("kubeconfig", "", "The tenant cluster's kubeconfig file (required). Its credentials must be inline: the manager refuses files and plugins.")
		namespace := fs.String("namespace", "default", "Host namespace of the kubeconfig Secret, NAME-kubeconfig.")
		wait := fs.Bool("wait", false, "Wait until the VirtualCluster is Ready; if it is not within --timeout, print its reason and fail.")
		timeout := fs.Duration("timeout", 2*time.Minute, "How long --wait waits.")
		return func(ctx context.Context, in cli.Invocation) error {
			if *kubeconfig == "" {
				return errors.New("--kubeconfig is required: the tenant cluster's kubeconfig file")
			}
			// NAME and the tenant's kubeconfig first: a mistake in either
			// is found before the host is asked anything.
			if errs := validation.IsDNS1123Label(in.Args[0]); len(errs) > 0 {
				return fmt.Errorf("NAME %q is not a VirtualCluster name: %s", in.Args[0], strings.Join(errs, "; "))
			}
			data, err := readKubeconfig(*kubeconfig)
			if err != nil {
				return err
			}
			c, err := host.client()
			if err != nil {
				return err
			}
			name := in.Args[0]
			if err := register(ctx, c, name, *namespace, data); err != nil {
				return err
			}
			fmt.Fprintf(in.Out, "virtualcluster/%s registered (kubeconfig in secret %s/%s-kubeconfig)\n", name, *namespace, name)
			if !*wait {
				return nil
			}
			vc, err := waitReady(ctx, c, name, *timeout)
			if err != nil {
				return err
			}
			fmt.Fprintf(in.Out, "virtualcluster/%s is Ready (replica %s)\n", name, vc.Status.Replica)
			return nil
		}
	},
}

// readKubeconfig reads a tenant's kubeconfig file and checks it as the
// manager will (whose refusal would be reason InvalidKubeconfig): a client
// configuration, with every credential inline.
func readKubeconfig(file string) ([]byte, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("reading the tenant's kubeconfig: %w", err)
	}
	if _, err := virtualcluster.RESTConfigFromKubeconfig(data); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return data, nil
}

// register applies the Secret holding the tenant's kubeconfig and the
// VirtualCluster name naming it.
func register(ctx context.Context, c client.Client, name, namespace string, kubeconfig []byte) error {
	secret := &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name + "-kubeconfig"},
		Data:       map[string][]byte{tenantryv1alpha1.DefaultKubeconfigKey: kubeconfig},
	}
	vc := &tenantryv1alpha1.VirtualCluster{
		TypeMeta:   metav1.TypeMeta{APIVersion: tenantryv1alpha1.GroupVersion.String(), Kind: "VirtualCluster"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: tenantryv1alpha1.VirtualClusterSpec{
			KubeconfigSecretRef: tenantryv1alpha1.SecretKeyReference{Namespace: namespace, Name: secret.Name, Key: tenantryv1alpha1.DefaultKubeconfigKey},
		},
	}
	// The VirtualCluster first: if the host refuses it (no CRD, no
	// right), no Secret of credentials is left behind.
	for _, o := range []client.Object{vc, secret} {
		if err := c.Patch(ctx, o, client.Apply, fieldOwner, client.ForceOwnership); err != nil {
			return fmt.Errorf("applying %s %s: %w", o.GetObjectKind().GroupVersionKind().Kind, client.ObjectKeyFromObject(o), err)
		}
	}
	return nil
}

// needsAPerson are the reasons of Ready=False that no retry mends: waiting
// for Ready stops at once on them.
var needsAPerson = []string{tenantryv1alpha1.ReasonInvalidKubeconfig, tenantryv1alpha1.ReasonHostCluster, tenantryv1alpha1.ReasonPaused,
	tenantryv1alpha1.ReasonUnknownVersion, tenantryv1alpha1.ReasonVersionSkew, tenantryv1alpha1.ReasonStorageRefused, tenantryv1alpha1.ReasonSecretTaken}

// waitReady waits until VirtualCluster name is Ready at its generation. If
// it is not within timeout, or is not Ready for a reason no retry mends,
// the error gives its reason and message.
func waitReady(parent context.Context, c client.Client, name string, timeout time.Duration) (*tenantryv1alpha1.VirtualCluster, error) {
	ctx, cancel := context.WithTimeout(parent, timeout)
	defer cancel()
	vc := &tenantryv1alpha1.VirtualCluster{}
	// stuck is a reason no retry mends; seen what the status said last (a
	// read cut short by the deadline says nothing of the cluster).
	var stuck, seen, readErr error
	err := wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKey{Name: name}, vc); err != nil {
			if ctx.Err() == nil && seen == nil { // what the status said wins over a failed read
				readErr = err
			}
			return false, nil
		}
		if cp := meta.FindStatusCondition(vc.Status.Conditions, tenantryv1alpha1.ConditionControlPlaneReady); cp != nil &&
			cp.Status != metav1.ConditionTrue && cp.ObservedGeneration == vc.Generation && slices.Contains(needsAPerson, cp.Reason) {
			stuck = fmt.Errorf("virtualcluster/%s's control plane is not Ready, reason %s: %s", name, cp.Reason, cp.Message)
			return true, nil
		}
		cond := meta.FindStatusCondition(vc.Status.Conditions, tenantryv1alpha1.ConditionReady)
		switch {
		case cond == nil:
			seen = errors.New("no Ready condition yet: is the manager running?")
		case cond.ObservedGeneration != vc.Generation:
			seen = fmt.Errorf("Ready=%s (%s) is of generation %d; the manager has not seen generation %d yet", cond.Status, cond.Reason, cond.ObservedGeneration, vc.Generation)
		case cond.Status == metav1.ConditionTrue:
			return true, nil
		case slices.Contains(needsAPerson, cond.Reason):
			stuck = fmt.Errorf("virtualcluster/%s is not Ready, reason %s: %s", name, cond.Reason, cond.Message)
			return true, nil
		default:
			seen = fmt.Errorf("Ready=%s, reason %s: %s", cond.Status, cond.Reason, cond.Message)
		}
		return false, nil
	})
	switch {
	case stuck != nil:
		return nil, stuck
	case parent.Err() != nil:
		return nil, fmt.Errorf("stopped waiting for virtualcluster/%s: %w", name, parent.Err())
	case err != nil && seen != nil:
		return nil, fmt.Errorf("virtualcluster/%s is not Ready after %s: %w", name, timeout, seen)
	case err != nil && readErr != nil:
		return nil, fmt.Errorf("virtualcluster/%s is not Ready after %s: %w (last error: %w)", name, timeout, err, readErr)
	case err != nil:
		return nil, fmt.Errorf("virtualcluster/%s is not Ready after %s: %w", name, timeout, err)
	}
	return vc, nil
}
