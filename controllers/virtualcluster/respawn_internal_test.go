package virtualcluster

import (
	"bytes"
	"reflect"
	"slices"
	"testing"

	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
)

// Every field of the spec re-spawns the tenant when it changes, but those
// the reconciler acts on without a re-spawn, and spec.controlPlane and
// spec.snapshots, which the tenant's app does not read: a field added later cannot be
// forgotten.
func TestEverySpecFieldButPausedRespawns(t *testing.T) {
	zero, err := respawnInputs(tenantryv1alpha1.VirtualClusterSpec{})
	if err != nil {
		t.Fatal(err)
	}
	fields := reflect.TypeFor[tenantryv1alpha1.VirtualClusterSpec]()
	for i := range fields.NumField() {
		f := fields.Field(i)
		var spec tenantryv1alpha1.VirtualClusterSpec
		setNonZero(t, reflect.ValueOf(&spec).Elem().Field(i))
		got, err := respawnInputs(spec)
		if err != nil {
			t.Fatal(err)
		}
		respawns := !bytes.Equal(got, zero)
		want := !slices.Contains([]string{"Paused", "KubeconfigSecretRef", "ControlPlane", "Snapshots", "Sleep"}, f.Name)
		if respawns != want {
			t.Errorf("a change of spec.%s re-spawns: %v, want %v", f.Name, respawns, want)
		}
	}
}

// setNonZero gives v, a field, a value other than its zero value.
func setNonZero(t *testing.T, v reflect.Value) {
	t.Helper()
	switch v.Kind() {
	case reflect.Bool:
		v.SetBool(true)
	case reflect.String:
		v.SetString("x")
	case reflect.Int, reflect.Int32, reflect.Int64:
		v.SetInt(1)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem())) // an empty object: set, which counts
	case reflect.Struct:
		setNonZero(t, v.Field(0))
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		v.SetMapIndex(reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem())
	default:
		t.Fatalf("no non-zero value for a %s field", v.Kind())
	}
}
