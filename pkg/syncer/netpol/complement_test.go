package netpol

import (
	"errors"
	"math/rand/v2"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Every label set over a small universe is matched by exactly one side:
// by one of the selectors, or by one of their complement's.
func TestComplementIsExact(t *testing.T) {
	keys, values := []string{"a", "b", "c"}, []string{"1", "2", "3"}
	var universe []labels.Set
	var fill func(i int, l labels.Set)
	fill = func(i int, l labels.Set) {
		if i == len(keys) {
			universe = append(universe, labels.Merge(labels.Set{}, l))
			return
		}
		fill(i+1, l) // the key absent
		for _, v := range values {
			l[keys[i]] = v
			fill(i+1, l)
			delete(l, keys[i])
		}
	}
	fill(0, labels.Set{})
	if len(universe) != 64 {
		t.Fatalf("universe of %d label sets, want 64", len(universe))
	}

	r := rand.New(rand.NewPCG(1, 2))
	operators := []metav1.LabelSelectorOperator{metav1.LabelSelectorOpIn, metav1.LabelSelectorOpNotIn, metav1.LabelSelectorOpExists, metav1.LabelSelectorOpDoesNotExist}
	someValues := func() []string {
		var out []string
		for _, v := range values {
			if r.IntN(2) == 0 {
				out = append(out, v)
			}
		}
		if len(out) == 0 {
			out = []string{values[r.IntN(len(values))]}
		}
		return out
	}
	tooComplex := 0
	for i := range 3000 {
		var selectors []metav1.LabelSelector
		for range 1 + r.IntN(4) {
			var s metav1.LabelSelector
			for range r.IntN(3) {
				k := keys[r.IntN(len(keys))]
				if r.IntN(3) == 0 {
					if s.MatchLabels == nil {
						s.MatchLabels = map[string]string{}
					}
					s.MatchLabels[k] = values[r.IntN(len(values))]
					continue
				}
				req := metav1.LabelSelectorRequirement{Key: k, Operator: operators[r.IntN(len(operators))]}
				if req.Operator == metav1.LabelSelectorOpIn || req.Operator == metav1.LabelSelectorOpNotIn {
					req.Values = someValues()
				}
				s.MatchExpressions = append(s.MatchExpressions, req)
			}
			selectors = append(selectors, s)
		}
		complement, err := Complement(selectors)
		if errors.Is(err, ErrTooComplex) {
			tooComplex++
			continue
		}
		if err != nil {
			t.Fatalf("case %d: Complement(%v): %v", i, selectors, err)
		}
		for _, l := range universe {
			in, out := matchesAny(t, selectors, l), matchesAny(t, complement, l)
			if in == out {
				t.Fatalf("case %d: labels %v: matched by the selectors %v, and by their complement %v; want exactly one\nselectors: %+v\ncomplement: %+v",
					i, l, in, out, selectors, complement)
			}
		}
	}
	if tooComplex > 300 {
		t.Errorf("%d of 3000 cases too complex: the absorption does too little", tooComplex)
	}
}

func matchesAny(t *testing.T, selectors []metav1.LabelSelector, l labels.Set) bool {
	t.Helper()
	for _, s := range selectors {
		sel, err := metav1.LabelSelectorAsSelector(&s)
		if err != nil {
			t.Fatalf("selector %+v: %v", s, err)
		}
		if sel.Matches(l) {
			return true
		}
	}
	return false
}

func TestComplementEdges(t *testing.T) {
	if got, err := Complement(nil); err != nil || len(got) != 1 || len(got[0].MatchLabels)+len(got[0].MatchExpressions) != 0 {
		t.Errorf("Complement(none) = %+v, %v; want one empty selector (every Pod)", got, err)
	}
	if got, err := Complement([]metav1.LabelSelector{{MatchLabels: map[string]string{"app": "db"}}, {}}); err != nil || len(got) != 0 {
		t.Errorf("Complement(app=db, everything) = %+v, %v; want none", got, err)
	}
	got, err := Complement([]metav1.LabelSelector{{MatchLabels: map[string]string{"app": "db"}}})
	want := metav1.LabelSelectorRequirement{Key: "app", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"db"}}
	if err != nil || len(got) != 1 || len(got[0].MatchExpressions) != 1 || got[0].MatchExpressions[0].Key != want.Key ||
		got[0].MatchExpressions[0].Operator != want.Operator || got[0].MatchExpressions[0].Values[0] != "db" {
		t.Errorf("Complement(app=db) = %+v, %v; want app NotIn [db]", got, err)
	}
	// Six selectors of two distinct keys each: 2^6 terms, none covering
	// another.
	var many []metav1.LabelSelector
	for i := range 6 {
		many = append(many, metav1.LabelSelector{MatchLabels: map[string]string{
			"k" + string(rune('a'+2*i)): "x", "k" + string(rune('a'+2*i+1)): "y",
		}})
	}
	if _, err := Complement(many); !errors.Is(err, ErrTooComplex) {
		t.Errorf("Complement of 6 selectors of 2 keys each: %v, want ErrTooComplex", err)
	}
}
