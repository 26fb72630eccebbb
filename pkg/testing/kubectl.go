package testing

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Kubectl runs the kubectl that `make envtest` builds beside the control
// planes' binaries, as a person would against a control plane of the kit.
type Kubectl struct {
	// Path is the kubectl binary.
	Path string
}

// FindKubectl finds kubectl in $KUBEBUILDER_ASSETS (AssetsEnv), where
// `make envtest` builds it.
func FindKubectl() (Kubectl, error) {
	path := filepath.Join(os.Getenv(AssetsEnv), "kubectl")
	if _, err := os.Stat(path); err != nil {
		return Kubectl{}, fmt.Errorf("no kubectl at %s: `make envtest` builds it into bin/, which the Makefile exports as $%s: %w", path, AssetsEnv, err)
	}
	return Kubectl{Path: path}, nil
}

// Run runs kubectl with kubeconfig and args, stdin (if not empty) as its
// input, and returns what it wrote, stdout and stderr together; the error
// says how it failed and with what output.
func (k Kubectl) Run(ctx context.Context, kubeconfig, stdin string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, k.Path, append([]string{"--kubeconfig", kubeconfig}, args...)...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// KubeconfigFile writes the control plane's kubeconfig (see Kubeconfig)
// into dir, as <name>.kubeconfig, and returns its path.
func (c *ControlPlane) KubeconfigFile(dir string) (string, error) {
	data, err := c.Kubeconfig()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, c.name+".kubeconfig")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return "", fmt.Errorf("control plane %q: writing its kubeconfig: %w", c.name, err)
	}
	return path, nil
}

// MustRun is Run within a minute of t's context, failing t if kubectl
// fails.
func (k Kubectl) MustRun(t testing.TB, kubeconfig, stdin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	out, err := k.Run(ctx, kubeconfig, stdin, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
