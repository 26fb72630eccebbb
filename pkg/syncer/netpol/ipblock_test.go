package netpol

import (
	"net/netip"
	"reflect"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
)

func TestConfineIPBlock(t *testing.T) {
	denied := []netip.Prefix{
		netip.MustParsePrefix("10.96.0.1/32"),   // the host API server
		netip.MustParsePrefix("169.254.0.0/16"), // cloud metadata
		netip.MustParsePrefix("fe80::/10"),
		netip.MustParsePrefix("10.200.0.0/16"), // a DataStore's network
	}
	for _, tc := range []struct {
		name  string
		block networkingv1.IPBlock
		want  *networkingv1.IPBlock
	}{
		{"everything keeps out every denied IPv4 prefix",
			networkingv1.IPBlock{CIDR: "0.0.0.0/0"},
			&networkingv1.IPBlock{CIDR: "0.0.0.0/0", Except: []string{"10.96.0.1/32", "10.200.0.0/16", "169.254.0.0/16"}}},
		{"the tenant's own except stays; one inside a denied prefix is folded in",
			networkingv1.IPBlock{CIDR: "10.0.0.0/8", Except: []string{"10.1.0.0/16", "10.200.3.0/24"}},
			&networkingv1.IPBlock{CIDR: "10.0.0.0/8", Except: []string{"10.1.0.0/16", "10.96.0.1/32", "10.200.0.0/16"}}},
		{"a block apart from every denied prefix is as written",
			networkingv1.IPBlock{CIDR: "192.0.2.0/24"},
			&networkingv1.IPBlock{CIDR: "192.0.2.0/24"}},
		{"a block inside a denied prefix admits nothing",
			networkingv1.IPBlock{CIDR: "169.254.169.254/32"}, nil},
		{"a block equal to a denied prefix admits nothing",
			networkingv1.IPBlock{CIDR: "10.200.0.0/16"}, nil},
		{"IPv6 keeps out IPv6's",
			networkingv1.IPBlock{CIDR: "::/0"},
			&networkingv1.IPBlock{CIDR: "::/0", Except: []string{"fe80::/10"}}},
		{"a block written with host bits is masked",
			networkingv1.IPBlock{CIDR: "10.96.0.7/12"},
			&networkingv1.IPBlock{CIDR: "10.96.0.0/12", Except: []string{"10.96.0.1/32"}}},
	} {
		got, err := ConfineIPBlock(tc.block, denied)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: ConfineIPBlock(%+v) = %+v, want %+v", tc.name, tc.block, got, tc.want)
		}
	}
	if _, err := ConfineIPBlock(networkingv1.IPBlock{CIDR: "not-a-cidr"}, denied); err == nil {
		t.Error("ConfineIPBlock of a bad CIDR: no error")
	}
}
