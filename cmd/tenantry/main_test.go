package main

import (
	"bytes"
	"strings"
	"testing"
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
