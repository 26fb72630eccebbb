package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/tenantry/tenantry/cmd/internal/cli"
	"github.com/tenantry/tenantry/pkg/snapshot"
)

var snapshotCommand = cli.Command{
	Name:  "snapshot",
	Args:  "NAME",
	NArgs: 1,
	Summary: "Write a snapshot of tenant cluster NAME, whose control plane Tenantry runs, to --out: every key of its storage at one revision, " +
		"read while it runs, with its spec, version and identity (its CAs and service account keys). It holds the tenant's Secrets: keep it as you keep its storage.",
	Flags: func(fs *flag.FlagSet) func(context.Context, cli.Invocation) error {
		var host hostFlags
		host.bind(fs)
		out := fs.String("out", "", "File to write the snapshot to, mode 0600 (default: NAME.snapshot.tar.gz); or oci://REGISTRY/REPOSITORY:TAG to push it as an OCI artifact, "+
			"with the Docker config's credentials (a registry on the loopback or a private address is reached over HTTP).")
		return func(ctx context.Context, in cli.Invocation) error {
			name := in.Args[0]
			if *out == "" {
				*out = name + ".snapshot.tar.gz"
			}
			oci := snapshot.IsOCI(*out)
			if strings.Contains(*out, "://") && !oci {
				return fmt.Errorf("--out %s: a destination is a file or %sREGISTRY/REPOSITORY:TAG", *out, snapshot.OCIScheme)
			}
			cfg, c, vc, err := host.virtualCluster(ctx, name)
			if err != nil {
				return err
			}
			// Written beside its destination (or in a temporary directory
			// for a push), and renamed there once whole: a failed
			// snapshot leaves nothing at --out.
			dir := filepath.Dir(*out)
			if oci {
				dir = ""
			}
			f, err := os.CreateTemp(dir, "."+filepath.Base(*out)+".*")
			if err != nil {
				return err
			}
			defer os.Remove(f.Name())
			taken, err := snapshot.OfVirtualCluster(ctx, cfg, c, vc, f, "")
			if err == nil {
				err = f.Sync()
			}
			if closeErr := f.Close(); err == nil {
				err = closeErr
			}
			if err != nil {
				return err
			}
			if oci {
				digest, err := snapshot.Push(ctx, f.Name(), *out)
				if err != nil {
					return err
				}
				*out += " (" + digest + ")"
			} else if err := os.Rename(f.Name(), *out); err != nil {
				return err
			}
			m := taken.Manifest
			fmt.Fprintf(in.Out, "snapshot of %s (%s, %s storage) at revision %d: %d keys, %s of data, %s written to %s in %s\n",
				name, m.KubernetesVersion, m.Storage, m.Revision, m.Keys, mebibytes(m.Bytes), mebibytes(taken.Size), *out, m.Took)
			return nil
		}
	},
}

func mebibytes(n int64) string { return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20)) }
