package fxlogr_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
	"go.uber.org/fx"

	"github.com/tenantry/tenantry/pkg/fxlogr"
)

func TestLogsAppEventsAndErrors(t *testing.T) {
	var lines []string
	log := funcr.New(func(prefix, args string) { lines = append(lines, prefix+" "+args) }, funcr.Options{Verbosity: 2})

	app := fx.New(
		fxlogr.WithLogger(log),
		fx.Provide(func() (int, error) { return 0, errors.New("no int today") }),
		fx.Invoke(func(int) {}),
	)
	if app.Err() == nil {
		t.Fatal("app built despite a failing constructor")
	}
	out := strings.Join(lines, "\n")
	for _, want := range []string{`fx "level"=2 "msg"="provided"`, `"msg"="invoked failed"`, "no int today"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
}
