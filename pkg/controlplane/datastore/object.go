package datastore

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
)

// ErrNotFound is a DataStore that does not exist.
var ErrNotFound = errors.New("no such DataStore")

// OpenNamed reaches the DataStore name (read from dataStores) as etcd's
// root user, with its Secret (read from secrets). Close the store.
func OpenNamed(ctx context.Context, dataStores, secrets client.Reader, name string) (*Store, error) {
	var ds tenantryv1alpha1.DataStore
	if err := dataStores.Get(ctx, client.ObjectKey{Name: name}, &ds); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("DataStore %s: %w", name, ErrNotFound)
		}
		return nil, fmt.Errorf("reading DataStore %s: %w", name, err)
	}
	return OpenObject(ctx, secrets, &ds)
}

// OpenObject reaches ds as etcd's root user, with its Secret (read from
// secrets). Close the store.
func OpenObject(ctx context.Context, secrets client.Reader, ds *tenantryv1alpha1.DataStore) (*Store, error) {
	ref := ds.Spec.Etcd.SecretRef
	var secret corev1.Secret
	if err := secrets.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, &secret); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("DataStore %s: %w: Secret %s/%s does not exist", ds.Name, ErrInvalidSecret, ref.Namespace, ref.Name)
		}
		return nil, fmt.Errorf("DataStore %s: reading Secret %s/%s: %w", ds.Name, ref.Namespace, ref.Name, err)
	}
	s, err := Open(ctx, ds.Spec.Etcd.Endpoints, secret.Data)
	if err != nil {
		return nil, fmt.Errorf("DataStore %s: %w", ds.Name, err)
	}
	return s, nil
}
