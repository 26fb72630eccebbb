package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/tenantry/tenantry/cmd/internal/cli"
	"github.com/tenantry/tenantry/pkg/snapshot"
)

var restoreCommand = cli.Command{
	Name:  "restore",
	Args:  "NAME",
	NArgs: 1,
	Summary: "Make tenant cluster NAME from a snapshot (tenantry snapshot), on any storage type: every object of the tenant is back, " +
		"with its identity (the kubeconfigs and service account tokens that trusted it trust it again), and its workloads run again once it is Ready. " +
		"The snapshot is checked whole first: a corrupt or truncated one makes nothing, nor does a restore that fails midway. " +
		"A VirtualCluster NAME that exists is refused unless --replace.",
	Flags: func(fs *flag.FlagSet) func(context.Context, cli.Invocation) error {
		var host hostFlags
		host.bind(fs)
		from := fs.String("from", "", "The snapshot (required): a file, or oci://REGISTRY/REPOSITORY:TAG (or @DIGEST) to pull, with the Docker config's credentials.")
		replace := fs.Bool("replace", false, "Delete VirtualCluster NAME first, with its control plane and its data, if it exists.")
		version := fs.String("version", "", "Kubernetes version of the control plane, as v1.37.2: the snapshot's, or one minor version on (default: the snapshot's spec's).")
		var storage storageFlags
		storage.bind(fs, "the snapshot's")
		wait := fs.Bool("wait", true, "Wait until the restored VirtualCluster is Ready; if it is not within --timeout, print its reason and fail.")
		timeout := fs.Duration("timeout", 5*time.Minute, "How long each wait lasts: for a replaced VirtualCluster to go, for the storage to run, for Ready.")
		return func(ctx context.Context, in cli.Invocation) error {
			name := in.Args[0]
			if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
				return fmt.Errorf("NAME %q is not a VirtualCluster name: %s", name, strings.Join(errs, "; "))
			}
			switch {
			case *from == "":
				return fmt.Errorf("--from is required: the snapshot to restore")
			case strings.Contains(*from, "://") && !snapshot.IsOCI(*from):
				return fmt.Errorf("--from %s: a source is a file or %sREGISTRY/REPOSITORY:TAG", *from, snapshot.OCIScheme)
			}
			opts := snapshot.RestoreOptions{Name: name, Replace: *replace, Version: *version, Timeout: *timeout,
				Progress: func(step string) { fmt.Fprintf(in.Out, "%s: %s\n", name, step) }}
			if storage.set() {
				if storage.storage == "" && storage.dataStore == "" {
					return fmt.Errorf("--storage-class and --storage-size choose a claim anew: give --storage too")
				}
				s, err := storage.parse()
				if err != nil {
					return err
				}
				opts.Storage = &s
			}
			cfg, err := host.config()
			if err != nil {
				return err
			}
			c, err := host.client()
			if err != nil {
				return err
			}
			file := *from
			if snapshot.IsOCI(*from) {
				// Pulled whole first: a restore reads it twice.
				f, err := os.CreateTemp("", "tenantry-restore-*.tar.gz")
				if err != nil {
					return err
				}
				defer os.Remove(f.Name())
				err = snapshot.Pull(ctx, *from, f)
				if closeErr := f.Close(); err == nil {
					err = closeErr
				}
				if err != nil {
					return err
				}
				file = f.Name()
			}
			open := func() (io.ReadCloser, error) { return os.Open(file) }
			restored, err := snapshot.Restore(ctx, cfg, c, open, opts)
			if err != nil {
				return fmt.Errorf("restoring %s from %s: %w", name, *from, err)
			}
			m := restored.Manifest
			fmt.Fprintf(in.Out, "virtualcluster/%s restored from a snapshot of %s (%s, %s storage, taken %s): %d keys loaded in %s\n",
				name, m.Cluster, m.KubernetesVersion, m.Storage, m.TakenAt.Format(time.RFC3339), restored.Keys, restored.Loading.Round(time.Millisecond))
			if !*wait {
				return nil
			}
			vc, err := waitReady(ctx, c, name, *timeout)
			if err != nil {
				return err
			}
			ref := vc.Spec.KubeconfigSecretRef
			fmt.Fprintf(in.Out, "virtualcluster/%s is Ready: its control plane runs Kubernetes %s; its kubeconfig is in secret %s/%s\n",
				name, vc.Status.ControlPlane.Version, ref.Namespace, ref.Name)
			return nil
		}
	},
}
