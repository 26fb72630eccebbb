package main

import (
	"errors"
	"flag"
	"fmt"

	"k8s.io/apimachinery/pkg/api/resource"

	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
)

// storageFlags choose where a control plane keeps its data.
type storageFlags struct {
	storage, dataStore, class, size string
}

func (f *storageFlags) bind(fs *flag.FlagSet, what string) {
	fs.StringVar(&f.storage, "storage", "", "Where the control plane keeps its data: Embedded (an etcd in the API server's Pod), Etcd (an etcd of its own in a Pod apart) or DataStore (a shared DataStore, --datastore). Default: "+what+".")
	fs.StringVar(&f.dataStore, "datastore", "", "The DataStore of --storage DataStore (implies it).")
	fs.StringVar(&f.class, "storage-class", "", "StorageClass of the control plane's data (default: the host's default class).")
	fs.StringVar(&f.size, "storage-size", "", "Size of the control plane's data (default: 1Gi).")
}

// set says whether any of the flags was given.
func (f *storageFlags) set() bool {
	return *f != storageFlags{}
}

// parse is the storage the flags say, checked.
func (f *storageFlags) parse() (tenantryv1alpha1.ControlPlaneStorage, error) {
	var out tenantryv1alpha1.ControlPlaneStorage
	storage := f.storage
	if f.dataStore != "" && storage == "" {
		storage = string(tenantryv1alpha1.StorageDataStore)
	}
	switch tenantryv1alpha1.StorageType(storage) {
	case "", tenantryv1alpha1.StorageEmbedded, tenantryv1alpha1.StorageEtcd:
		if f.dataStore != "" {
			return out, fmt.Errorf("--datastore %s is of --storage DataStore, not %s", f.dataStore, storage)
		}
	case tenantryv1alpha1.StorageDataStore:
		if f.dataStore == "" {
			return out, errors.New("--storage DataStore needs --datastore NAME")
		}
		if f.class != "" || f.size != "" {
			return out, errors.New("--storage-class and --storage-size are of a claim, which a control plane on a DataStore has none of")
		}
	default:
		return out, fmt.Errorf("--storage %q: want Embedded, Etcd or DataStore", storage)
	}
	out.Type, out.DataStore = tenantryv1alpha1.StorageType(storage), f.dataStore
	if f.class != "" {
		out.StorageClassName = &f.class
	}
	if f.size != "" {
		size, err := resource.ParseQuantity(f.size)
		if err != nil {
			return out, fmt.Errorf("--storage-size %q: %w", f.size, err)
		}
		out.Size = &size
	}
	return out, nil
}
