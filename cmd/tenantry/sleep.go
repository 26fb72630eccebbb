package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/cmd/internal/cli"
	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
	"github.com/tenantry/tenantry/pkg/controlplane"
)

var sleepCommand = cli.Command{
	Name:  "sleep",
	Args:  "NAME",
	NArgs: 1,
	Summary: "Put tenant cluster NAME, whose control plane Tenantry runs, to sleep: no Pod of its own runs in the host (control plane or workload), " +
		"its objects stay in its storage, and the host copies of all but its Pods stay. 'tenantry wake NAME' wakes it.",
	Flags: func(fs *flag.FlagSet) func(context.Context, cli.Invocation) error {
		var host hostFlags
		host.bind(fs)
		wait := fs.Bool("wait", true, "Wait until it sleeps (its condition Asleep is True).")
		timeout := fs.Duration("timeout", 2*time.Minute, "How long --wait waits.")
		return func(ctx context.Context, in cli.Invocation) error {
			c, vc, err := provisioned(ctx, host, in.Args[0])
			if err != nil {
				return err
			}
			if err := controlplane.AskToSleep(ctx, c, vc.Name); err != nil {
				return err
			}
			if !*wait {
				fmt.Fprintf(in.Out, "virtualcluster/%s asked to sleep\n", vc.Name)
				return nil
			}
			began := time.Now()
			if err := waitAsleep(ctx, c, vc.Name, *timeout); err != nil {
				return err
			}
			fmt.Fprintf(in.Out, "virtualcluster/%s is asleep (in %s): no Pod of it runs in the host; 'tenantry wake %s' wakes it\n",
				vc.Name, time.Since(began).Round(100*time.Millisecond), vc.Name)
			return nil
		}
	},
}

var wakeCommand = cli.Command{
	Name:    "wake",
	Args:    "NAME",
	NArgs:   1,
	Summary: "Wake tenant cluster NAME from its sleep: its control plane starts on its data, and its workloads run again, as after any restart.",
	Flags: func(fs *flag.FlagSet) func(context.Context, cli.Invocation) error {
		var host hostFlags
		host.bind(fs)
		wait := fs.Bool("wait", true, "Wait until it is Ready; if it is not within --timeout, print its reason and fail.")
		timeout := fs.Duration("timeout", 5*time.Minute, "How long --wait waits.")
		return func(ctx context.Context, in cli.Invocation) error {
			c, vc, err := provisioned(ctx, host, in.Args[0])
			if err != nil {
				return err
			}
			if err := controlplane.AskToWake(ctx, c, vc.Name); err != nil {
				return err
			}
			if !*wait {
				fmt.Fprintf(in.Out, "virtualcluster/%s asked to wake\n", vc.Name)
				return nil
			}
			began := time.Now()
			if _, err := waitReady(ctx, c, vc.Name, *timeout); err != nil {
				return err
			}
			fmt.Fprintf(in.Out, "virtualcluster/%s is awake and Ready (in %s)\n", vc.Name, time.Since(began).Round(100*time.Millisecond))
			return nil
		}
	},
}

// provisioned reads VirtualCluster name, whose control plane Tenantry
// must run, and gives a client of the host.
func provisioned(ctx context.Context, host hostFlags, name string) (client.Client, *tenantryv1alpha1.VirtualCluster, error) {
	_, c, vc, err := host.virtualCluster(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	if vc.Spec.ControlPlane == nil {
		return nil, nil, fmt.Errorf("virtualcluster/%s: %w: it can neither sleep nor wake", name, controlplane.ErrNotProvisioned)
	}
	return c, vc, nil
}

// waitAsleep waits until VirtualCluster name's condition Asleep is True.
func waitAsleep(ctx context.Context, c client.Client, name string, timeout time.Duration) error {
	var seen *metav1.Condition
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		var vc tenantryv1alpha1.VirtualCluster
		if err := c.Get(ctx, client.ObjectKey{Name: name}, &vc); err != nil {
			return false, nil
		}
		seen = meta.FindStatusCondition(vc.Status.Conditions, tenantryv1alpha1.ConditionAsleep)
		return seen != nil && seen.Status == metav1.ConditionTrue, nil
	})
	switch {
	case err == nil:
		return nil
	case seen != nil:
		return fmt.Errorf("virtualcluster/%s is not asleep after %s: %s: %s", name, timeout, seen.Reason, seen.Message)
	default:
		return fmt.Errorf("virtualcluster/%s is not asleep after %s: no condition Asleep yet: is the manager running, with control planes on?", name, timeout)
	}
}
