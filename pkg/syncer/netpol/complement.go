// Package netpol translates a tenant's NetworkPolicies into the host
// (docs/design/tenant-network-policies.md): the pieces that need no
// cluster, each a function of its inputs. Complement writes "every Pod no
// policy selects" as label selectors, ConfineIPBlock keeps an ipBlock from
// the addresses a tenant may not reach, and NamespaceSelector confines a
// namespace selector to one tenant's host namespaces.
package netpol

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
)

// MaxComplement is the most selectors Complement returns: the complement
// of n selectors of k requirements each takes up to k^n.
const MaxComplement = 32

// ErrTooComplex says that the complement of the selectors takes more than
// MaxComplement selectors.
var ErrTooComplex = errors.New("the Pods that no policy selects take more label selectors than Tenantry writes")

// Complement returns label selectors that together (their union) match
// exactly the label sets that none of selectors matches: an empty list
// when one of them is empty (it matches every Pod), one empty selector when
// selectors is empty. selectors must be valid (as the API server admits
// them). It fails with ErrTooComplex past MaxComplement.
func Complement(selectors []metav1.LabelSelector) ([]metav1.LabelSelector, error) {
	// ¬(S1 ∨ … ∨ Sn) = ¬S1 ∧ … ∧ ¬Sn, and ¬Si, Si being a conjunction of
	// requirements, is the disjunction of their negations: the result is
	// the product of those disjunctions, each term one conjunction.
	terms := []term{{}}
	for _, s := range selectors {
		negated, err := negations(s)
		if err != nil {
			return nil, err
		}
		var next []term
		seen := sets.New[string]()
		for _, t := range terms {
			for _, n := range negated {
				combined, ok := t.and(n)
				if !ok {
					continue // a contradiction matches nothing
				}
				if key := combined.String(); !seen.Has(key) {
					seen.Insert(key)
					next = append(next, combined)
				}
			}
		}
		terms = absorb(next)
		if len(terms) > MaxComplement {
			return nil, fmt.Errorf("%w (%d, at most %d)", ErrTooComplex, len(terms), MaxComplement)
		}
	}
	out := make([]metav1.LabelSelector, 0, len(terms))
	for _, t := range terms {
		out = append(out, t.selector())
	}
	return out, nil
}

// constraint is what a term asks of one label key.
type constraint struct {
	exists, absent bool
	in             sets.Set[string] // nil: any value
	notIn          sets.Set[string]
}

// term is a conjunction of constraints, one per key.
type term map[string]constraint

// negations are the single-requirement terms whose union is the
// complement of s.
func negations(s metav1.LabelSelector) ([]term, error) {
	var out []term
	for _, k := range slices.Sorted(maps.Keys(s.MatchLabels)) {
		out = append(out, term{k: {notIn: sets.New(s.MatchLabels[k])}})
	}
	for _, r := range s.MatchExpressions {
		var c constraint
		switch r.Operator {
		case metav1.LabelSelectorOpIn:
			c.notIn = sets.New(r.Values...)
		case metav1.LabelSelectorOpNotIn:
			c.in = sets.New(r.Values...)
		case metav1.LabelSelectorOpExists:
			c.absent = true
		case metav1.LabelSelectorOpDoesNotExist:
			c.exists = true
		default:
			return nil, fmt.Errorf("label selector operator %q", r.Operator)
		}
		out = append(out, term{r.Key: c})
	}
	return out, nil
}

// and is the conjunction of t and u, and false when it matches nothing.
func (t term) and(u term) (term, bool) {
	out := make(term, len(t)+len(u))
	for k, c := range t {
		out[k] = c
	}
	for k, c := range u {
		if have, ok := out[k]; ok {
			merged, ok := have.and(c)
			if !ok {
				return nil, false
			}
			out[k] = merged
		} else {
			out[k] = c
		}
	}
	return out, true
}

// and is the conjunction of two constraints on one key, normalized: a
// value set implies the key exists and takes the exclusions in.
func (c constraint) and(d constraint) (constraint, bool) {
	out := constraint{exists: c.exists || d.exists, absent: c.absent || d.absent}
	switch {
	case c.in != nil && d.in != nil:
		out.in = c.in.Intersection(d.in)
	case c.in != nil:
		out.in = c.in.Clone()
	case d.in != nil:
		out.in = d.in.Clone()
	}
	out.notIn = sets.New[string]().Union(c.notIn).Union(d.notIn)
	if out.in != nil {
		out.in = out.in.Difference(out.notIn)
		out.notIn, out.exists = nil, false
		if out.in.Len() == 0 || out.absent {
			return constraint{}, false
		}
	}
	if out.exists && out.absent {
		return constraint{}, false
	}
	if out.absent {
		out.notIn = nil // an absent key has no value to exclude
	}
	return out, true
}

// implies says whether every state of the key that c admits (absent, or
// a value) d admits too.
func (c constraint) implies(d constraint) bool {
	if c.admitsAbsent() && !d.admitsAbsent() {
		return false
	}
	switch {
	case c.absent:
		return true // no value
	case d.absent:
		return false // c admits a value, d none
	case c.in != nil && d.in != nil:
		return d.in.IsSuperset(c.in)
	case c.in != nil:
		return !d.notIn.HasAny(sets.List(c.in)...)
	case d.in != nil:
		return false // all values but a few, against a few
	default:
		return c.notIn.IsSuperset(d.notIn)
	}
}

// admitsAbsent says whether c admits a label set without its key.
func (c constraint) admitsAbsent() bool { return !c.exists && c.in == nil }

// implies says whether t admits only label sets that u admits.
func (t term) implies(u term) bool {
	for k, d := range u {
		c, ok := t[k]
		if !ok || !c.implies(d) {
			return false
		}
	}
	return true
}

// absorb drops every term that another term already covers (t implies u:
// t adds nothing to the union).
func absorb(terms []term) []term {
	var out []term
	for i, t := range terms {
		covered := false
		for j, u := range terms {
			if i != j && t.implies(u) && (!u.implies(t) || j < i) {
				covered = true
				break
			}
		}
		if !covered {
			out = append(out, t)
		}
	}
	return out
}

// selector writes t as a label selector, its requirements sorted.
func (t term) selector() metav1.LabelSelector {
	var s metav1.LabelSelector
	for _, k := range slices.Sorted(maps.Keys(t)) {
		c := t[k]
		switch {
		case c.in != nil && c.in.Len() == 1:
			if s.MatchLabels == nil {
				s.MatchLabels = map[string]string{}
			}
			s.MatchLabels[k] = sets.List(c.in)[0]
		case c.in != nil:
			s.MatchExpressions = append(s.MatchExpressions, metav1.LabelSelectorRequirement{Key: k, Operator: metav1.LabelSelectorOpIn, Values: sets.List(c.in)})
		case c.absent:
			s.MatchExpressions = append(s.MatchExpressions, metav1.LabelSelectorRequirement{Key: k, Operator: metav1.LabelSelectorOpDoesNotExist})
		default:
			if c.exists {
				s.MatchExpressions = append(s.MatchExpressions, metav1.LabelSelectorRequirement{Key: k, Operator: metav1.LabelSelectorOpExists})
			}
			if c.notIn.Len() > 0 {
				s.MatchExpressions = append(s.MatchExpressions, metav1.LabelSelectorRequirement{Key: k, Operator: metav1.LabelSelectorOpNotIn, Values: sets.List(c.notIn)})
			}
		}
	}
	return s
}

// String is t in a canonical form, for deduplication.
func (t term) String() string {
	s := t.selector()
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(s.MatchLabels)) {
		fmt.Fprintf(&b, "%s=%s,", k, s.MatchLabels[k])
	}
	for _, r := range s.MatchExpressions {
		fmt.Fprintf(&b, "%s %s %v,", r.Key, r.Operator, r.Values)
	}
	return b.String()
}
