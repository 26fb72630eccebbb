package providers

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/zapr"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// maxVerbosity is the highest logr V-level that --log-level accepts.
const maxVerbosity = 10

// LoggerOptions configure the process logger. Bind them to flags with
// BindFlags; the zero value logs at info level in production mode.
type LoggerOptions struct {
	// Development switches to human-readable console output with caller
	// and stack traces on warnings, and turns sampling off. Production mode
	// writes sampled JSON lines.
	Development bool

	// Level is the least severe message written: "debug", "info", "warn",
	// "error", or a verbosity N that writes logr's V(0) through V(N)
	// ("debug" is V(1)). Empty means "info".
	Level string

	// Output receives the log lines. Defaults to os.Stderr.
	Output io.Writer
}

// BindFlags registers --log-development and --log-level on fs.
func (o *LoggerOptions) BindFlags(fs *flag.FlagSet) {
	fs.BoolVar(&o.Development, "log-development", o.Development,
		"Human-readable console logs with stack traces on warnings, instead of sampled JSON.")
	if o.Level == "" {
		o.Level = "info"
	}
	fs.StringVar(&o.Level, "log-level", o.Level,
		fmt.Sprintf("Least severe message to log: debug, info, warn, error, or a verbosity 0-%d (logr V-level; debug is 1).", maxVerbosity))
}

// NewLogger builds a zap logger behind the logr interface from opts. It
// rejects a level it does not know, naming the accepted ones.
func NewLogger(opts LoggerOptions) (logr.Logger, error) {
	level, err := parseLevel(opts.Level)
	if err != nil {
		return logr.Discard(), err
	}
	out := opts.Output
	if out == nil {
		out = os.Stderr
	}

	var (
		encoder  zapcore.Encoder
		zapOpts  = []zap.Option{zap.ErrorOutput(zapcore.AddSync(out))}
		sampling = !opts.Development
	)
	if opts.Development {
		cfg := zap.NewDevelopmentEncoderConfig()
		encoder = zapcore.NewConsoleEncoder(cfg)
		zapOpts = append(zapOpts, zap.Development(), zap.AddCaller(), zap.AddStacktrace(zapcore.WarnLevel))
	} else {
		cfg := zap.NewProductionEncoderConfig()
		cfg.EncodeTime = zapcore.ISO8601TimeEncoder
		encoder = zapcore.NewJSONEncoder(cfg)
		zapOpts = append(zapOpts, zap.AddStacktrace(zapcore.ErrorLevel))
	}

	core := zapcore.NewCore(encoder, zapcore.Lock(zapcore.AddSync(out)), zap.NewAtomicLevelAt(level))
	if sampling {
		// As zap's production preset: per second and message, the first
		// 100 lines, then every 100th.
		core = zapcore.NewSamplerWithOptions(core, time.Second, 100, 100)
	}
	return zapr.NewLogger(zap.New(deferredFields{core}, zapOpts...)), nil
}

// deferredFields is a zap core whose With only records the fields: they
// are encoded when a line is written, and never for a logger that writes
// nothing. Every reconcile of every tenant adds its keys (controller,
// object, reconcileID, resource) to a logger that, at the default level,
// usually writes no line: encoding them at once was a twentieth of the
// manager's CPU per synced object.
type deferredFields struct{ zapcore.Core }

func (c deferredFields) With(fields []zapcore.Field) zapcore.Core {
	return deferredFields{zapcore.NewLazyWith(c.Core, fields)}
}

// parseLevel maps a --log-level value to a zap level; logr's V(n) is zap's
// level -n.
func parseLevel(s string) (zapcore.Level, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "info":
		return zapcore.InfoLevel, nil
	case "debug":
		return zapcore.DebugLevel, nil
	case "warn", "warning":
		return zapcore.WarnLevel, nil
	case "error":
		return zapcore.ErrorLevel, nil
	}
	v, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || v < 0 || v > maxVerbosity {
		return 0, fmt.Errorf("invalid log level %q: want debug, info, warn, error or a verbosity from 0 to %d", s, maxVerbosity)
	}
	return zapcore.Level(-v), nil
}

// SetProcessLoggers routes controller-runtime's and klog's global loggers
// (client-go logs through klog) to log. They are process-wide and not safe to
// change while clients run: call it once, early in main.
func SetProcessLoggers(log logr.Logger) {
	ctrllog.SetLogger(log)
	klog.SetLoggerWithOptions(log, klog.ContextualLogger(true))
}
