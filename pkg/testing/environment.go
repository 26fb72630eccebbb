package testing

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// ErrStopped is returned by a ControlPlane whose Environment was stopped.
var ErrStopped = errors.New("control plane has been stopped")

// AssetsEnv is the environment variable naming the directory that holds the
// kube-apiserver and etcd binaries (envtest's convention). `make envtest`
// builds them into bin/, and the Makefile exports this variable for tests.
const AssetsEnv = "KUBEBUILDER_ASSETS"

// Options configure an Environment. The zero value starts a host and no
// tenants, with the binaries from $KUBEBUILDER_ASSETS.
type Options struct {
	// Tenants is how many tenant control planes to start besides the host.
	Tenants int

	// HostCRDDirectoryPaths are files or directories of CustomResourceDefinition
	// manifests installed into the host before Start returns. A missing path
	// is an error.
	HostCRDDirectoryPaths []string

	// TenantCRDDirectoryPaths are installed into every tenant likewise.
	TenantCRDDirectoryPaths []string

	// HostCRDs are installed into the host too, from objects rather than
	// files (for example, CRDs a binary embeds).
	HostCRDs []*apiextensionsv1.CustomResourceDefinition

	// BinaryAssetsDirectory holds kube-apiserver and etcd. Defaults to
	// $KUBEBUILDER_ASSETS.
	BinaryAssetsDirectory string

	// StartTimeout bounds the start of each etcd and kube-apiserver process,
	// and StopTimeout their stop. Default to envtest's 60s each.
	StartTimeout time.Duration
	StopTimeout  time.Duration

	// AttachControlPlaneOutput sends the processes' output to this process's
	// stdout and stderr, to debug a control plane that does not start.
	AttachControlPlaneOutput bool
}

// Environment is a host control plane and any number of tenant control
// planes, each a real etcd and kube-apiserver on loopback, all run by one
// process. Start one with Start, or with New inside a test.
type Environment struct {
	// Host is the management cluster.
	Host *ControlPlane
	// Tenants are the tenant clusters, named tenant-1, tenant-2, ...
	Tenants []*ControlPlane
}

// Start starts the host and opts.Tenants tenant control planes in parallel
// and returns once all of them serve. If any fails to start, the ones that did
// are stopped again and the error names the one that failed. A process start
// cannot be interrupted (StartTimeout bounds it); if ctx ends meanwhile, Start
// stops what it started and returns ctx's error.
func Start(ctx context.Context, opts Options) (*Environment, error) {
	if opts.Tenants < 0 {
		return nil, fmt.Errorf("tenant count must not be negative, got %d", opts.Tenants)
	}
	if opts.BinaryAssetsDirectory == "" {
		opts.BinaryAssetsDirectory = os.Getenv(AssetsEnv)
	}
	if err := checkAssets(opts.BinaryAssetsDirectory); err != nil {
		return nil, err
	}

	names := []string{"host"}
	for i := 1; i <= opts.Tenants; i++ {
		names = append(names, fmt.Sprintf("tenant-%d", i))
	}

	planes := make([]*ControlPlane, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		crdPaths, crds := opts.TenantCRDDirectoryPaths, []*apiextensionsv1.CustomResourceDefinition(nil)
		if i == 0 {
			crdPaths, crds = opts.HostCRDDirectoryPaths, opts.HostCRDs
		}
		wg.Go(func() {
			planes[i], errs[i] = startControlPlane(name, &opts, crdPaths, crds)
		})
	}
	wg.Wait()
	err := errors.Join(errs...)
	if err == nil && ctx.Err() != nil {
		err = fmt.Errorf("starting control planes: %w", context.Cause(ctx))
	}

	env := &Environment{Host: planes[0], Tenants: planes[1:]}
	if err != nil {
		return nil, errors.Join(err, env.Stop())
	}
	return env, nil
}

// New starts an Environment for a test and stops it when the test and its
// subtests end. It fails the test at once if the control planes cannot start,
// saying how to get the binaries when they are missing.
func New(t testing.TB, opts Options) *Environment {
	t.Helper()
	env, err := Start(t.Context(), opts)
	if err != nil {
		t.Fatalf("starting test control planes: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping test control planes: %v", err)
		}
	})
	return env
}

// ControlPlanes returns the host followed by the tenants.
func (e *Environment) ControlPlanes() []*ControlPlane {
	return append([]*ControlPlane{e.Host}, e.Tenants...)
}

// Stop stops every control plane and removes its data. It is safe to call
// more than once; later calls do nothing.
func (e *Environment) Stop() error {
	var wg sync.WaitGroup
	planes := e.ControlPlanes()
	errs := make([]error, len(planes))
	for i, cp := range planes {
		if cp == nil {
			continue
		}
		wg.Go(func() { errs[i] = cp.stop() })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// checkAssets fails early, and says what to do, when the binaries are missing.
func checkAssets(dir string) error {
	if dir == "" {
		return fmt.Errorf("no control plane binaries: set %s to a directory holding kube-apiserver and etcd (run `make envtest`, which builds them into bin/)", AssetsEnv)
	}
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		path := filepath.Join(dir, bin)
		info, err := os.Stat(path)
		if err != nil {
			return fmt.Errorf("control plane binary %s: %w (run `make envtest`, or point %s at a directory holding it)", path, err, AssetsEnv)
		}
		if info.IsDir() || info.Mode()&0o111 == 0 {
			return fmt.Errorf("control plane binary %s is not an executable file", path)
		}
	}
	return nil
}
