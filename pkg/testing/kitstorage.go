package testing

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// KitStorageClass is the default StorageClass of a host with real nodes
// (Options.HostKubelets): the kit provisions each of its claims a
// hostPath volume in a directory of its own, which every real node sees,
// since they share this machine's disk. It is for tests: the data go with
// the environment.
const KitStorageClass = "kit-hostpath"

// kitProvisioner names the provisioner of KitStorageClass.
const kitProvisioner = "tenantry.dev/kit-hostpath"

// kitStorage provisions and reclaims the volumes of KitStorageClass.
type kitStorage struct {
	clientset kubernetes.Interface
	dir       string
	stop      context.CancelFunc
	done      sync.WaitGroup
}

// startKitStorage makes KitStorageClass the host's default class and
// provisions its claims until stopped, with volumes under dir.
func startKitStorage(ctx context.Context, clientset kubernetes.Interface, dir string) (*kitStorage, error) {
	class := &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{Name: KitStorageClass, Annotations: map[string]string{
			"storageclass.kubernetes.io/is-default-class": "true",
		}},
		Provisioner:       kitProvisioner,
		ReclaimPolicy:     ptr.To(corev1.PersistentVolumeReclaimDelete),
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingImmediate),
	}
	if _, err := clientset.StorageV1().StorageClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("the kit's StorageClass: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	// Its requests log through a logger of their own: client-go would
	// read the process's klog logger, which a test may set meanwhile.
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logr.Discard()))
	s := &kitStorage{clientset: clientset, dir: dir, stop: cancel}
	s.done.Go(func() {
		// A claim waits up to a second: a test's claims are few.
		wait.UntilWithContext(ctx, s.sync, time.Second)
	})
	return s, nil
}

// close stops provisioning.
func (s *kitStorage) close() {
	s.stop()
	s.done.Wait()
}

// sync provisions a volume for each pending claim of the kit's class, and
// deletes each released volume of it with its directory.
func (s *kitStorage) sync(ctx context.Context) {
	claims, err := s.clientset.CoreV1().PersistentVolumeClaims(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return // the next round
	}
	for _, c := range claims.Items {
		if c.Status.Phase != corev1.ClaimPending || c.Spec.VolumeName != "" || ptr.Deref(c.Spec.StorageClassName, "") != KitStorageClass {
			continue
		}
		_ = s.provision(ctx, &c)
	}
	volumes, err := s.clientset.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	for _, v := range volumes.Items {
		if v.Spec.StorageClassName != KitStorageClass || v.Status.Phase != corev1.VolumeReleased || v.Spec.HostPath == nil {
			continue
		}
		if err := os.RemoveAll(v.Spec.HostPath.Path); err != nil {
			continue
		}
		_ = s.clientset.CoreV1().PersistentVolumes().Delete(ctx, v.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &v.UID}})
	}
}

// provision makes claim c a volume, bound to it: a directory anyone may
// write, as a fresh disk is to the Pod's fsGroup.
func (s *kitStorage) provision(ctx context.Context, c *corev1.PersistentVolumeClaim) error {
	name := "pvc-" + string(c.UID)
	path := filepath.Join(s.dir, name)
	if err := os.MkdirAll(path, 0o777); err != nil {
		return err
	}
	if err := os.Chmod(path, 0o777); err != nil { // past the umask
		return err
	}
	size := c.Spec.Resources.Requests[corev1.ResourceStorage]
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"pv.kubernetes.io/provisioned-by": kitProvisioner}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: size},
			AccessModes:                   c.Spec.AccessModes,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			StorageClassName:              KitStorageClass,
			ClaimRef: &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1",
				Namespace: c.Namespace, Name: c.Name, UID: c.UID},
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{
				Path: path, Type: ptr.To(corev1.HostPathDirectory),
			}},
		},
	}
	_, err := s.clientset.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}
