package syncer

import "testing"

func TestContains(t *testing.T) {
	for _, c := range []struct {
		name       string
		have, want any
		contains   bool
	}{
		{"equal", map[string]any{"a": "1"}, map[string]any{"a": "1"}, true},
		{"a key more", map[string]any{"a": "1", "b": "2"}, map[string]any{"a": "1"}, true},
		{"a key less", map[string]any{"a": "1"}, map[string]any{"a": "1", "b": "2"}, false},
		{"a value changed", map[string]any{"a": "2"}, map[string]any{"a": "1"}, false},
		{"nested key more", map[string]any{"s": map[string]any{"x": int64(1), "y": true}}, map[string]any{"s": map[string]any{"x": int64(1)}}, true},
		{"zero scalar left unset", map[string]any{}, map[string]any{"n": int64(0), "f": false, "s": ""}, true},
		{"zero scalar changed", map[string]any{"f": true}, map[string]any{"f": false}, false},
		{"list element more fields", map[string]any{"l": []any{map[string]any{"a": "1", "b": "2"}}}, map[string]any{"l": []any{map[string]any{"a": "1"}}}, true},
		{"list element more", map[string]any{"l": []any{"x", "y"}}, map[string]any{"l": []any{"x"}}, false},
		{"list reordered", map[string]any{"l": []any{"y", "x"}}, map[string]any{"l": []any{"x", "y"}}, false},
		{"empty map held by absence", map[string]any{}, map[string]any{"m": map[string]any{}}, true},
		{"map wanted, scalar found", map[string]any{"m": "x"}, map[string]any{"m": map[string]any{"a": "1"}}, false},
	} {
		if got := contains(c.have, c.want); got != c.contains {
			t.Errorf("%s: contains(%v, %v) = %v, want %v", c.name, c.have, c.want, got, c.contains)
		}
	}
}
