package sharding

import (
	"fmt"
	"strings"
	"testing"
)

// Rendezvous hashing spreads keys evenly, and a peer that joins or leaves
// moves only the keys it wins or held.
func TestOwnerSpreadsAndMovesFew(t *testing.T) {
	const keys = 3000
	three := []string{"a", "b", "c"}
	four := append([]string{"d"}, three...)
	counts := map[string]int{}
	moved := 0
	for i := range keys {
		key := fmt.Sprintf("vc-%d", i)
		before, after := OwnerAmong(three, key), OwnerAmong(four, key)
		counts[before]++
		if before != after {
			moved++
			if after != "d" {
				t.Fatalf("key %s moved from %s to %s, not to the peer that joined", key, before, after)
			}
		}
		if without := OwnerAmong([]string{"a", "c"}, key); before != "b" && without != before {
			t.Fatalf("key %s moved from %s to %s when b left", key, before, without)
		}
	}
	for _, p := range three {
		if n := counts[p]; n < keys/3*8/10 || n > keys/3*12/10 {
			t.Errorf("peer %s owns %d of %d keys; want about a third", p, n, keys)
		}
	}
	if moved < keys/4*8/10 || moved > keys/4*12/10 {
		t.Errorf("%d of %d keys moved when a fourth peer joined; want about a quarter", moved, keys)
	}
	if OwnerAmong(nil, "vc-1") != "" {
		t.Error("a key has an owner among no peers")
	}
	if OwnerAmong(three, "vc-1") != OwnerAmong([]string{"c", "a", "b"}, "vc-1") {
		t.Error("the owner depends on the peers' order")
	}
}

func TestOptionsAreChecked(t *testing.T) {
	for _, tc := range []struct {
		opts Options
		want string
	}{
		{Options{Group: "g"}, "Namespace is required"},
		{Options{Namespace: "ns", Group: "Not_A_Label"}, `group "Not_A_Label"`},
		{Options{Namespace: "ns", Group: "g", LeaseDuration: 5e9, RenewDeadline: 5e9}, "must be shorter than the lease duration"},
		{Options{Namespace: "ns", Group: "g", RenewDeadline: 2e9, RenewPeriod: 2e9}, "must be shorter than the renew deadline"},
		{Options{Namespace: "ns", Group: "g", Identity: "UPPER"}, `identity "UPPER"`},
	} {
		err := tc.opts.setDefaults()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v; want %q", tc.opts, err, tc.want)
		}
	}
	o := Options{Namespace: "ns", Group: "g"}
	if err := o.setDefaults(); err != nil || o.Identity == "" || o.LeaseDuration != DefaultLeaseDuration {
		t.Errorf("defaults: %+v, %v", o, err)
	}
}
