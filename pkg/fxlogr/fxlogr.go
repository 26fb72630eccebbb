// Package fxlogr writes go.uber.org/fx's own events (constructors provided,
// hooks run, app started or stopped) to a logr.Logger, so that an fx app logs
// like the rest of the process instead of printing to stderr.
package fxlogr

import (
	"strings"

	"github.com/go-logr/logr"
	"go.uber.org/fx"
	"go.uber.org/fx/fxevent"
)

// Verbosity of fx events that report no error: the app's start and stop at
// V(1), the wiring (provides, invokes, hooks) at V(2). Errors are logged at
// error level.
const (
	lifecycleV = 1
	wiringV    = 2
)

// WithLogger is an fx.Option that sends the app's events to log.
func WithLogger(log logr.Logger) fx.Option {
	return fx.WithLogger(func() fxevent.Logger { return New(log) })
}

// Logger is an fxevent.Logger over logr.
type Logger struct {
	log logr.Logger
}

var _ fxevent.Logger = Logger{}

// New returns an fx event logger that writes to log under the name "fx".
func New(log logr.Logger) Logger {
	return Logger{log: log.WithName("fx")}
}

// LogEvent implements fxevent.Logger.
func (l Logger) LogEvent(event fxevent.Event) {
	switch e := event.(type) {
	case *fxevent.OnStartExecuted:
		l.result(wiringV, e.Err, "OnStart hook", "callee", e.FunctionName, "caller", e.CallerName, "runtime", e.Runtime.String())
	case *fxevent.OnStopExecuted:
		l.result(wiringV, e.Err, "OnStop hook", "callee", e.FunctionName, "caller", e.CallerName, "runtime", e.Runtime.String())
	case *fxevent.Supplied:
		l.result(wiringV, e.Err, "supplied", "type", e.TypeName, "module", e.ModuleName)
	case *fxevent.Provided:
		l.result(wiringV, e.Err, "provided", "constructor", e.ConstructorName, "types", strings.Join(e.OutputTypeNames, ", "), "module", e.ModuleName)
	case *fxevent.Decorated:
		l.result(wiringV, e.Err, "decorated", "decorator", e.DecoratorName, "types", strings.Join(e.OutputTypeNames, ", "), "module", e.ModuleName)
	case *fxevent.Invoked:
		l.result(wiringV, e.Err, "invoked", "function", e.FunctionName, "module", e.ModuleName)
	case *fxevent.Started:
		l.result(lifecycleV, e.Err, "app started")
	case *fxevent.Stopped:
		l.result(lifecycleV, e.Err, "app stopped")
	case *fxevent.RollingBack:
		l.log.Error(e.StartErr, "start failed, rolling back")
	case *fxevent.RolledBack:
		l.result(lifecycleV, e.Err, "rolled back")
	case *fxevent.Stopping:
		l.log.V(lifecycleV).Info("received signal", "signal", e.Signal.String())
	case *fxevent.LoggerInitialized:
		l.result(wiringV, e.Err, "logger initialized", "constructor", e.ConstructorName)
	}
}

// result logs msg at verbosity v, or as an error when err is set.
func (l Logger) result(v int, err error, msg string, kv ...any) {
	if err != nil {
		l.log.Error(err, msg+" failed", kv...)
		return
	}
	l.log.V(v).Info(msg, kv...)
}
