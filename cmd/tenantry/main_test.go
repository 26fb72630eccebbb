package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestRunUsage(t *testing.T) {
	for _, tc := range []struct {
		args     []string
		wantCode int
		wantOut  string
	}{
		{args: nil, wantCode: 2, wantOut: "Commands:"},
		{args: []string{"help"}, wantCode: 0, wantOut: "dev"},
		{args: []string{"bogus"}, wantCode: 2, wantOut: `unknown command "bogus"`},
		{args: []string{"dev", "--help"}, wantCode: 0, wantOut: "-tenants"},
		{args: []string{"dev", "--no-such-flag"}, wantCode: 2, wantOut: "no-such-flag"},
		{args: []string{"dev", "extra"}, wantCode: 2, wantOut: `unexpected arguments ["extra"]`},
		{args: []string{"dev", "--log-level", "loud"}, wantCode: 1, wantOut: `invalid log level "loud"`},
	} {
		var out bytes.Buffer
		if code := run(tc.args, &out); code != tc.wantCode || !strings.Contains(out.String(), tc.wantOut) {
			t.Errorf("run(%q) = %d with %q, want %d with %q", tc.args, code, out.String(), tc.wantCode, tc.wantOut)
		}
	}
}

// The demo, end to end, with one tenant: what `make demo` runs.
func TestDemo(t *testing.T) {
	var out bytes.Buffer
	err := runDemo(t.Context(), devOptions{tenants: 1, metricsBindAddress: "0", healthProbeBindAddress: "0"}, time.Minute, &out)
	if err != nil {
		t.Fatalf("demo failed: %v\n%s", err, out.String())
	}
	for _, want := range []string{"6/6 synced", "cluster IP", "is Running on demo-node-1 with IP 10.244.1.10", "demo complete"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo output lacks %q:\n%s", want, out.String())
		}
	}
}
