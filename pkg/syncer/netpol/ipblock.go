package netpol

import (
	"fmt"
	"net/netip"
	"slices"

	networkingv1 "k8s.io/api/networking/v1"
)

// ConfineIPBlock returns block with every prefix of denied that lies in it
// added to its except, so that it admits no address of denied; nil when
// denied covers the whole block (it admits nothing: the caller must not
// leave a rule without peers, which admits everyone). The tenant's own
// except entries stay. denied need not be canonical.
func ConfineIPBlock(block networkingv1.IPBlock, denied []netip.Prefix) (*networkingv1.IPBlock, error) {
	cidr, err := netip.ParsePrefix(block.CIDR)
	if err != nil {
		return nil, fmt.Errorf("ipBlock.cidr %q: %w", block.CIDR, err)
	}
	cidr = cidr.Masked()
	out := &networkingv1.IPBlock{CIDR: cidr.String()}
	var except []netip.Prefix
	for _, e := range block.Except {
		p, err := netip.ParsePrefix(e)
		if err != nil {
			return nil, fmt.Errorf("ipBlock.except %q: %w", e, err)
		}
		except = append(except, p.Masked())
	}
	for _, d := range denied {
		d = d.Masked()
		if d.Addr().Is4() != cidr.Addr().Is4() {
			continue
		}
		switch {
		case d.Bits() <= cidr.Bits() && d.Contains(cidr.Addr()):
			return nil, nil // the whole block is denied
		case d.Bits() > cidr.Bits() && cidr.Contains(d.Addr()):
			except = append(except, d)
		}
	}
	// Canonical: sorted, and no entry inside another.
	slices.SortFunc(except, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	for _, e := range except {
		if n := len(out.Except); n > 0 {
			last := netip.MustParsePrefix(out.Except[n-1])
			if last.Bits() <= e.Bits() && last.Contains(e.Addr()) {
				continue
			}
		}
		out.Except = append(out.Except, e.String())
	}
	return out, nil
}
