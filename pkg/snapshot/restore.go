package snapshot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
	"github.com/tenantry/tenantry/pkg/controlplane"
	"github.com/tenantry/tenantry/pkg/controlplane/datastore"
)

// ErrExists is a restore into a VirtualCluster, or what would be its
// control plane's, that exists: restore under another name, or replace
// it (RestoreOptions.Replace).
var ErrExists = errors.New("exists")

// RestoreOptions say what Restore makes of a snapshot.
type RestoreOptions struct {
	// Name is the VirtualCluster to make.
	Name string
	// Replace deletes the VirtualCluster Name first, with its control
	// plane and its data, if it exists. Without it, one that exists is
	// refused (ErrExists).
	Replace bool
	// Version is the Kubernetes version to run, one minor version on
	// from the snapshot's at most; "": the snapshot's spec's.
	Version string
	// Storage is where to keep the data; nil: as the snapshot's spec
	// says. Any type restores into any other.
	Storage *tenantryv1alpha1.ControlPlaneStorage
	// Timeout bounds each wait: for a replaced VirtualCluster to go, and
	// for the storage to run. Zero: 5 minutes.
	Timeout time.Duration
	// Progress, if set, is told each step as it begins.
	Progress func(step string)
}

// Restored is what Restore did.
type Restored struct {
	// Manifest is the snapshot's.
	Manifest Manifest
	// VirtualCluster is the VirtualCluster made, as it was created.
	VirtualCluster *tenantryv1alpha1.VirtualCluster
	// Keys is how many keys were loaded, in Loading.
	Keys    int
	Loading time.Duration
}

// Restore makes VirtualCluster opts.Name from the snapshot that open
// reads (and reads again), through the host (its config, and c), and
// returns once every key is in its storage and its control plane starts
// whole; wait for its Ready condition after. In turn:
//
//  1. The snapshot is read through and checked whole: a corrupt or
//     truncated one (ErrCorrupt) makes nothing.
//  2. Its spec is taken, with the version and storage of opts, and its
//     kubeconfig Secret renamed for a new name (NAME-kubeconfig). The
//     version must run the snapshot's data (controlplane.ErrVersionSkew);
//     the name and its control plane's namespace must be free
//     (ErrExists), or opts.Replace frees them; a DataStore must hold no
//     keys of the name.
//  3. The control plane's namespace is made with the snapshot's identity
//     (its CAs and service account keys), then the VirtualCluster, marked
//     tenantryv1alpha1.AnnotationRestoring: its control plane runs its
//     storage alone, and nothing of it syncs.
//  4. The keys are loaded into the empty storage, under its prefix.
//  5. The mark goes: the control plane starts whole on the restored
//     data, and syncs as after any start.
//
// If a step fails, what Restore made is deleted (the VirtualCluster with
// its control plane and whatever keys were loaded), and the error says
// which step failed.
func Restore(ctx context.Context, host *rest.Config, c client.Client, open func() (io.ReadCloser, error), opts RestoreOptions) (_ Restored, retErr error) {
	if opts.Timeout == 0 {
		opts.Timeout = 5 * time.Minute
	}
	progress := func(step string) {
		if opts.Progress != nil {
			opts.Progress(step)
		}
	}
	progress("checking the snapshot")
	m, err := verify(open)
	if err != nil {
		return Restored{}, err
	}
	vc, retain, err := restoredVirtualCluster(m, opts)
	if err != nil {
		return Restored{}, err
	}
	if err := free(ctx, c, vc, opts, progress); err != nil {
		return Restored{}, err
	}

	// From here on, what is made is madeSoFar on failure.
	var madeSoFar []made
	defer func() {
		if retErr == nil {
			return
		}
		progress("deleting what the failed restore made")
		if err := undo(context.WithoutCancel(ctx), c, madeSoFar, opts.Timeout); err != nil {
			retErr = fmt.Errorf("%w; and undoing it: %w", retErr, err)
		}
	}()
	progress("making its control plane's namespace, with the snapshot's identity")
	spec := controlplane.Spec{Cluster: vc.Name}
	namespace := spec.NamespaceObject()
	if err := c.Create(ctx, namespace); err != nil {
		return Restored{}, fmt.Errorf("making namespace %s: %w", namespace.Name, err)
	}
	madeSoFar = append(madeSoFar, made{"namespace " + namespace.Name, namespace})
	if len(m.PKI) > 0 {
		pki := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace.Name, Name: controlplane.PKISecretName, Labels: controlplane.Labels(vc.Name)},
			Type:       corev1.SecretTypeOpaque,
			Data:       m.PKI,
		}
		if err := c.Create(ctx, pki); err != nil {
			return Restored{}, fmt.Errorf("writing the snapshot's identity to Secret %s/%s: %w", pki.Namespace, pki.Name, err)
		}
	}
	progress("making virtualcluster/" + vc.Name + ", its storage alone")
	if err := c.Create(ctx, vc); err != nil {
		return Restored{}, fmt.Errorf("making virtualcluster/%s: %w", vc.Name, err)
	}
	madeSoFar = append(madeSoFar, made{"virtualcluster/" + vc.Name, vc})
	created := vc.DeepCopy()
	if err := awaitStorage(ctx, c, vc, opts.Timeout); err != nil {
		return Restored{}, err
	}

	progress("loading the snapshot's keys")
	began := time.Now()
	keys, err := load(ctx, host, c, vc, open, opts.Timeout)
	if err != nil {
		return Restored{}, err
	}
	loading := time.Since(began)

	progress("starting its control plane whole")
	// The mark, and nothing else of what others may have set meanwhile.
	done, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"annotations": map[string]any{tenantryv1alpha1.AnnotationRestoring: nil}},
		"spec":     map[string]any{"controlPlane": map[string]any{"retainData": retain}},
	})
	if err != nil {
		return Restored{}, err
	}
	if err := c.Patch(ctx, vc, client.RawPatch(types.MergePatchType, done)); err != nil {
		return Restored{}, fmt.Errorf("ending virtualcluster/%s's restore: %w", vc.Name, err)
	}
	return Restored{Manifest: m, VirtualCluster: created, Keys: keys, Loading: loading}, nil
}

// verify reads the snapshot of open through and checks it whole.
func verify(open func() (io.ReadCloser, error)) (Manifest, error) {
	in, err := open()
	if err != nil {
		return Manifest{}, err
	}
	defer in.Close()
	r, err := Open(in)
	if err != nil {
		return Manifest{}, err
	}
	if err := r.Each(func(_, _ []byte) error { return nil }); err != nil {
		return Manifest{}, err
	}
	return r.Manifest, nil
}

// restoredVirtualCluster is the VirtualCluster that a restore of m makes,
// marked as restoring, with data not retained until the restore is done
// (a failed restore keeps nothing); and whether the snapshot's spec
// retained them.
func restoredVirtualCluster(m Manifest, opts RestoreOptions) (*tenantryv1alpha1.VirtualCluster, bool, error) {
	var spec tenantryv1alpha1.VirtualClusterSpec
	if err := json.Unmarshal(m.Spec, &spec); err != nil || spec.ControlPlane == nil {
		return nil, false, fmt.Errorf("%w: its manifest holds no VirtualCluster spec with a control plane (%v)", ErrCorrupt, err)
	}
	cp := spec.ControlPlane
	if opts.Version != "" {
		cp.Version = opts.Version
	}
	if opts.Storage != nil {
		cp.Storage = *opts.Storage
	}
	if cp.Version != "" {
		switch err := controlplane.CheckVersionChange(m.KubernetesVersion, cp.Version); {
		case errors.Is(err, controlplane.ErrVersionSkew):
			return nil, false, fmt.Errorf("the snapshot's data, of Kubernetes %s, cannot run at %s: %w", m.KubernetesVersion, cp.Version, controlplane.ErrVersionSkew)
		case err != nil:
			return nil, false, err
		}
	}
	if opts.Name != m.Cluster {
		// The snapshot's Secret is its own cluster's.
		spec.KubeconfigSecretRef.Name = opts.Name + "-kubeconfig"
	}
	retain := cp.RetainData
	cp.RetainData = false
	return &tenantryv1alpha1.VirtualCluster{
		ObjectMeta: metav1.ObjectMeta{Name: opts.Name, Annotations: map[string]string{tenantryv1alpha1.AnnotationRestoring: m.KubernetesVersion}},
		Spec:       spec,
	}, retain, nil
}

// free checks that nothing of vc's name is in the way of its restore, or
// with opts.Replace deletes it and waits until it is gone.
func free(ctx context.Context, c client.Client, vc *tenantryv1alpha1.VirtualCluster, opts RestoreOptions, progress func(string)) error {
	var old tenantryv1alpha1.VirtualCluster
	switch err := c.Get(ctx, client.ObjectKey{Name: vc.Name}, &old); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return fmt.Errorf("reading virtualcluster/%s: %w", vc.Name, err)
	case !opts.Replace:
		return fmt.Errorf("virtualcluster/%s %w: restore under another name, or replace it", vc.Name, ErrExists)
	default:
		progress("deleting virtualcluster/" + vc.Name + ", which the restore replaces, with its data")
		if cp := old.Spec.ControlPlane; cp != nil && cp.RetainData {
			patch := client.MergeFromWithOptions(old.DeepCopy(), client.MergeFromWithOptimisticLock{})
			cp.RetainData = false
			if err := c.Patch(ctx, &old, patch); err != nil {
				return fmt.Errorf("virtualcluster/%s: letting its data go with it: %w", vc.Name, err)
			}
		}
		if err := c.Delete(ctx, &old, client.Preconditions{UID: &old.UID}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting virtualcluster/%s: %w", vc.Name, err)
		}
		if err := gone(ctx, c, opts.Timeout, "virtualcluster/"+vc.Name, &old); err != nil {
			return err
		}
	}
	namespace := &corev1.Namespace{}
	switch err := c.Get(ctx, client.ObjectKey{Name: controlplane.Namespace(vc.Name)}, namespace); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return fmt.Errorf("reading namespace %s: %w", controlplane.Namespace(vc.Name), err)
	case opts.Replace && namespace.Labels[controlplane.LabelControlPlane] == vc.Name:
		// What an earlier VirtualCluster of the name retained.
		progress("deleting namespace " + namespace.Name + ", which the restore replaces")
		if err := c.Delete(ctx, namespace, client.Preconditions{UID: &namespace.UID}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting namespace %s: %w", namespace.Name, err)
		}
		if err := gone(ctx, c, opts.Timeout, "namespace "+namespace.Name, namespace); err != nil {
			return err
		}
	default:
		return fmt.Errorf("namespace %s, where virtualcluster/%s's control plane would run, %w (the data of an earlier one, retained?): delete it, or restore under another name",
			namespace.Name, vc.Name, ErrExists)
	}
	ref := vc.Spec.KubeconfigSecretRef
	switch err := c.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, &corev1.Secret{}); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return fmt.Errorf("reading Secret %s/%s: %w", ref.Namespace, ref.Name, err)
	default:
		return fmt.Errorf("Secret %s/%s, where Tenantry would write virtualcluster/%s's kubeconfig, %w: delete it, or restore under another name",
			ref.Namespace, ref.Name, vc.Name, ErrExists)
	}
	if store := vc.Spec.ControlPlane.Storage; store.Type == tenantryv1alpha1.StorageDataStore {
		s, err := datastore.OpenNamed(ctx, c, c, store.DataStore)
		if err != nil {
			return err
		}
		defer s.Close()
		keys, err := s.Keys(ctx, vc.Name)
		if err != nil {
			return fmt.Errorf("DataStore %s: %w", store.DataStore, err)
		}
		if keys > 0 {
			return fmt.Errorf("DataStore %s holds %d keys of a control plane named %s (the data of an earlier one, retained?), which a restore would mix with the snapshot's: "+
				"restore under another name, or delete them (%s)", store.DataStore, keys, vc.Name, datastore.Prefix(vc.Name))
		}
	}
	return nil
}

// awaitStorage waits until vc's control plane runs its storage for the
// snapshot's keys (ControlPlaneReady=False, reason Restoring), or fails
// for a reason no wait mends.
func awaitStorage(ctx context.Context, c client.Client, vc *tenantryv1alpha1.VirtualCluster, timeout time.Duration) error {
	var seen *metav1.Condition
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(vc), vc); err != nil {
			return false, nil // read again
		}
		seen = meta.FindStatusCondition(vc.Status.Conditions, tenantryv1alpha1.ConditionControlPlaneReady)
		if seen == nil || seen.ObservedGeneration != vc.Generation {
			return false, nil
		}
		if slices.Contains(refusals, seen.Reason) {
			return false, fmt.Errorf("virtualcluster/%s's control plane is refused, reason %s: %s", vc.Name, seen.Reason, seen.Message)
		}
		return seen.Reason == tenantryv1alpha1.ReasonRestoring, nil
	})
	switch {
	case err == nil:
		return nil
	case seen != nil && wait.Interrupted(err):
		return fmt.Errorf("virtualcluster/%s's storage does not run after %s: %s: %s", vc.Name, timeout, seen.Reason, seen.Message)
	case wait.Interrupted(err):
		return fmt.Errorf("virtualcluster/%s's control plane has no condition after %s: is the manager running, with control planes on?", vc.Name, timeout)
	}
	return err
}

// refusals are the reasons of ControlPlaneReady that no wait mends.
var refusals = []string{tenantryv1alpha1.ReasonUnknownVersion, tenantryv1alpha1.ReasonVersionSkew,
	tenantryv1alpha1.ReasonStorageRefused, tenantryv1alpha1.ReasonSecretTaken}

// load writes the snapshot's keys into vc's storage, which must hold
// none, once it answers.
func load(ctx context.Context, host *rest.Config, c client.Reader, vc *tenantryv1alpha1.VirtualCluster, open func() (io.ReadCloser, error), timeout time.Duration) (int, error) {
	var storage *controlplane.Storage
	var openErr error
	err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		// Its Pod may be starting still, or just restarted: try again.
		storage, openErr = controlplane.OpenStorage(ctx, host, c, vc)
		return openErr == nil, nil
	})
	if err != nil {
		return 0, fmt.Errorf("reaching virtualcluster/%s's storage: %w (last: %w)", vc.Name, err, openErr)
	}
	defer storage.Close()
	in, err := open()
	if err != nil {
		return 0, err
	}
	defer in.Close()
	r, err := Open(in)
	if err != nil {
		return 0, err
	}
	n, err := Load(ctx, storage.Client, storage.Prefix, r)
	if err != nil {
		return n, fmt.Errorf("loading the snapshot into virtualcluster/%s's %s storage: %w", vc.Name, storage.Type, err)
	}
	return n, nil
}

// gone waits until o, which is what, is gone.
func gone(ctx context.Context, c client.Client, timeout time.Duration, what string, o client.Object) error {
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, client.ObjectKeyFromObject(o), o)
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %s to go: %w", what, err)
	}
	return nil
}

// made is an object a restore made, and what to call it.
type made struct {
	what   string
	object client.Object
}

// undo deletes what a failed restore made, the last first, and waits
// until it is gone: the VirtualCluster takes its control plane and its
// loaded keys with it.
func undo(ctx context.Context, c client.Client, objects []made, timeout time.Duration) error {
	var errs []error
	for _, o := range slices.Backward(objects) {
		if err := c.Delete(ctx, o.object); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("deleting %s: %w", o.what, err))
			continue
		}
		if err := gone(ctx, c, timeout, o.what, o.object); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
