package cli

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	var got []string
	var gotFlag string
	greet := Command{
		Name: "greet", Summary: "Greet NAME.", Args: "NAME", NArgs: 1,
		Flags: func(fs *flag.FlagSet) func(context.Context, Invocation) error {
			how := fs.String("how", "hello", "The greeting.")
			return func(_ context.Context, in Invocation) error {
				if in.Args[0] == "nobody" {
					return errors.New("no one to greet")
				}
				gotFlag = *how
				_, err := io.WriteString(in.Out, *how+" "+in.Args[0])
				return err
			}
		},
	}
	pass := Command{Name: "pass", Summary: "Hand over.", Exec: func(args []string, stdout, _ io.Writer) int {
		got = args
		return 7
	}}
	secret := Command{Name: "secret", Summary: "Not listed.", Flags: func(*flag.FlagSet) func(context.Context, Invocation) error {
		return func(context.Context, Invocation) error { return nil }
	}}
	p := Program{Name: "prog", Commands: []Command{greet, pass}, Hidden: []Command{secret}, Note: "See also other-prog."}

	for _, tc := range []struct {
		args     []string
		wantCode int
		wantOut  string
		notOut   string
	}{
		{args: nil, wantCode: 2, wantOut: "Usage: prog <command> [flags]"},
		{args: []string{"help"}, wantCode: 0, wantOut: "See also other-prog.", notOut: "secret"},
		{args: []string{"bogus"}, wantCode: 2, wantOut: `prog: unknown command "bogus"`},
		{args: []string{"greet", "--help"}, wantCode: 0, wantOut: "Usage: prog greet NAME [flags]"},
		{args: []string{"greet"}, wantCode: 2, wantOut: "prog greet: missing NAME"},
		{args: []string{"greet", "a", "b"}, wantCode: 2, wantOut: `prog greet: want NAME, got ["a" "b"]`},
		{args: []string{"greet", "ann", "--how", "hi"}, wantCode: 0, wantOut: "hi ann"},
		{args: []string{"greet", "--how", "hey", "bob"}, wantCode: 0, wantOut: "hey bob"},
		{args: []string{"greet", "nobody"}, wantCode: 1, wantOut: "prog greet: no one to greet"},
		{args: []string{"greet", "--no-such-flag", "x"}, wantCode: 2, wantOut: "no-such-flag"},
		{args: []string{"secret"}, wantCode: 0},
		{args: []string{"secret", "x"}, wantCode: 2, wantOut: `prog secret: unexpected arguments ["x"]`},
	} {
		var out bytes.Buffer
		code := p.Run(tc.args, &out, &out)
		if code != tc.wantCode || !strings.Contains(out.String(), tc.wantOut) || (tc.notOut != "" && strings.Contains(out.String(), tc.notOut)) {
			t.Errorf("Run(%q) = %d with %q, want %d with %q", tc.args, code, out.String(), tc.wantCode, tc.wantOut)
		}
	}
	if gotFlag != "hey" {
		t.Errorf("the last greeting's flag: %q, want hey", gotFlag)
	}

	// Exec gets the arguments unparsed, and its result is the exit code.
	var out bytes.Buffer
	if code := p.Run([]string{"pass", "--help", "x", "--flag=1"}, &out, &out); code != 7 || strings.Join(got, " ") != "--help x --flag=1" {
		t.Errorf("Run(pass ...) = %d with arguments %q, want 7 with --help x --flag=1", code, got)
	}
}
