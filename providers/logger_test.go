package providers

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestNewLoggerLevels(t *testing.T) {
	for _, tc := range []struct {
		level      string
		wantV      []int // V-levels written
		wantHidden []int // V-levels dropped
	}{
		{level: "", wantV: []int{0}, wantHidden: []int{1}},
		{level: "info", wantV: []int{0}, wantHidden: []int{1}},
		{level: "debug", wantV: []int{0, 1}, wantHidden: []int{2}},
		{level: "3", wantV: []int{0, 1, 2, 3}, wantHidden: []int{4}},
		{level: "error", wantHidden: []int{0}},
	} {
		t.Run(tc.level, func(t *testing.T) {
			var out bytes.Buffer
			log, err := NewLogger(LoggerOptions{Level: tc.level, Output: &out})
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range append(append([]int{}, tc.wantV...), tc.wantHidden...) {
				log.V(v).Info("line", "v", v)
			}
			lines := decodeLines(t, out.String())
			written := map[int]bool{}
			for _, l := range lines {
				written[int(l["v"].(float64))] = true
			}
			for _, v := range tc.wantV {
				if !written[v] {
					t.Errorf("V(%d) not written at level %q", v, tc.level)
				}
			}
			for _, v := range tc.wantHidden {
				if written[v] {
					t.Errorf("V(%d) written at level %q", v, tc.level)
				}
			}
		})
	}
}

func TestNewLoggerRejectsUnknownLevel(t *testing.T) {
	for _, level := range []string{"verbose", "-1", "11"} {
		_, err := NewLogger(LoggerOptions{Level: level})
		if err == nil || !strings.Contains(err.Error(), level) {
			t.Errorf("level %q: error %v does not name the bad level", level, err)
		}
	}
}

func TestNewLoggerModes(t *testing.T) {
	var prod, dev bytes.Buffer
	p, err := NewLogger(LoggerOptions{Output: &prod})
	if err != nil {
		t.Fatal(err)
	}
	p.Info("hello", "cluster", "tenant-1")
	line := decodeLines(t, prod.String())[0]
	if line["msg"] != "hello" || line["cluster"] != "tenant-1" || line["level"] != "info" {
		t.Errorf("production line = %v", line)
	}

	d, err := NewLogger(LoggerOptions{Development: true, Output: &dev})
	if err != nil {
		t.Fatal(err)
	}
	d.Info("hello", "cluster", "tenant-1")
	if s := dev.String(); strings.HasPrefix(s, "{") || !strings.Contains(s, "INFO") || !strings.Contains(s, `"cluster": "tenant-1"`) {
		t.Errorf("development output is not console-formatted: %q", s)
	}
}

func decodeLines(t *testing.T, s string) []map[string]any {
	t.Helper()
	var lines []map[string]any
	for _, raw := range strings.Split(strings.TrimSpace(s), "\n") {
		if raw == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(raw), &m); err != nil {
			t.Fatalf("log line %q is not JSON: %v", raw, err)
		}
		lines = append(lines, m)
	}
	return lines
}

// Values added with WithValues are encoded when a line is written: each
// logger in a chain writes its own and its parents', and none leaks into
// a sibling's.
func TestNewLoggerDeferredValues(t *testing.T) {
	var out bytes.Buffer
	log, err := NewLogger(LoggerOptions{Output: &out})
	if err != nil {
		t.Fatal(err)
	}
	tenant := log.WithValues("cluster", "alpha")
	reconcile := tenant.WithName("syncer").WithValues("object", "ns/a")
	sibling := tenant.WithValues("object", "ns/b")
	reconcile.V(1).Info("not written")
	reconcile.Info("first", "n", 1)
	sibling.Info("second")
	tenant.Info("third")

	lines := decodeLines(t, out.String())
	if len(lines) != 3 {
		t.Fatalf("want 3 lines, got %d: %s", len(lines), out.String())
	}
	for i, want := range []map[string]any{
		{"msg": "first", "cluster": "alpha", "object": "ns/a", "logger": "syncer", "n": float64(1)},
		{"msg": "second", "cluster": "alpha", "object": "ns/b"},
		{"msg": "third", "cluster": "alpha"},
	} {
		for k, v := range want {
			if lines[i][k] != v {
				t.Errorf("line %d: %s = %v, want %v (line: %v)", i, k, lines[i][k], v, lines[i])
			}
		}
	}
	if _, ok := lines[2]["object"]; ok {
		t.Errorf("a child's value reached its parent: %v", lines[2])
	}
}
