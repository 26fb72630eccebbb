package testing

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// logTailLines is how many of a process's last log lines an error about it
// quotes.
const logTailLines = 20

// process is a control-plane component that the harness runs beside an API
// server (kube-controller-manager, kube-scheduler, kwok): started once,
// waited on until ready, stopped with the Environment. It reaches its API
// server through the cluster's proxy, so the fault tools affect it as they
// affect any other client.
type process struct {
	cluster string
	name    string
	cmd     *exec.Cmd
	log     *processLog

	exited  chan struct{} // closed once the process has ended
	exitErr error         // how it ended; read only after exited is closed
	// reported is set once an error has told of the process's failure, so
	// that stopping it does not tell again.
	reported bool
	// cleanup, if set, runs once the process has ended (componentSpec).
	cleanup func() error
	// kill skips SIGTERM (componentSpec).
	kill bool
}

// startProcess starts binary with args, its output going to log.
func startProcess(cluster, name, binary string, args, env []string, log *processLog) (*process, error) {
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = append(os.Environ(), env...)
	cmd.WaitDelay = processStopTimeout // a child holding the output open does not hang Wait
	dieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("control plane %q: starting %s: %w", cluster, name, err)
	}
	p := &process{cluster: cluster, name: name, cmd: cmd, log: log, exited: make(chan struct{})}
	go func() {
		p.exitErr = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// waitReady polls ready until it returns nil, the process exits, or timeout
// passes. A failure names the process, what ready last said, and the
// process's last log lines.
func (p *process) waitReady(ctx context.Context, timeout time.Duration, ready func(context.Context) error) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		select {
		case <-p.exited:
			return false, fmt.Errorf("exited before it was ready (%v)", p.exitErr)
		default:
		}
		last = ready(ctx)
		return last == nil, nil
	})
	if err == nil {
		return nil
	}
	if wait.Interrupted(err) && last != nil {
		err = fmt.Errorf("not ready within %s: %w", timeout, last)
	}
	p.reported = true
	return p.failure(err)
}

// failure wraps err with the process's identity and last log lines.
func (p *process) failure(err error) error {
	return fmt.Errorf("control plane %q: %s: %w\n%s", p.cluster, p.name, err, p.log.tailReport())
}

// stop ends the process, then removes what it left behind (its cleanup).
func (p *process) stop() error {
	err := p.end()
	if p.cleanup != nil {
		err = errors.Join(err, p.cleanup())
	}
	return err
}

// end ends the process: SIGTERM, then SIGKILL if it has not ended within
// processStopTimeout. A process that was killed, or ended on SIGTERM,
// stopped as asked.
func (p *process) end() error {
	select {
	case <-p.exited:
		if p.reported {
			return nil
		}
		return p.failure(fmt.Errorf("had exited on its own before the environment stopped (%v)", p.exitErr))
	default:
	}
	if !p.kill {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
			return nil
		case <-time.After(processStopTimeout):
		}
	}
	_ = p.cmd.Process.Kill()
	<-p.exited
	return nil
}

// processLog is where a process's output goes: always into a bounded tail
// kept for errors, and to the writers the Options ask for (a file under
// LogDirectory, this process's stderr).
type processLog struct {
	name string
	out  io.Writer
	file *os.File

	mu   sync.Mutex
	tail []byte
}

// maxTailBytes bounds what a processLog keeps in memory.
const maxTailBytes = 16 << 10

// newProcessLog opens the log of one process of cluster. dir, if set, gets
// the file <cluster>-<name>.log, appended to so that a restarted process
// continues it; attach also copies the output to w.
func newProcessLog(cluster, name, dir string, attach io.Writer) (*processLog, error) {
	l := &processLog{name: name}
	var outs []io.Writer
	if dir != "" {
		path := filepath.Join(dir, cluster+"-"+name+".log")
		f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return nil, fmt.Errorf("control plane %q: opening the log of %s: %w", cluster, name, err)
		}
		l.file = f
		outs = append(outs, f)
	}
	if attach != nil {
		outs = append(outs, attach)
	}
	l.out = io.MultiWriter(outs...)
	return l, nil
}

func (l *processLog) Write(b []byte) (int, error) {
	l.mu.Lock()
	l.tail = append(l.tail, b...)
	if over := len(l.tail) - maxTailBytes; over > 0 {
		l.tail = append(l.tail[:0], l.tail[over:]...)
	}
	l.mu.Unlock()
	// A failing log file or terminal must not stop the process: its
	// output still reaches the tail.
	_, _ = l.out.Write(b)
	return len(b), nil
}

// tailReport is the last lines of output, indented, for an error message.
func (l *processLog) tailReport() string {
	l.mu.Lock()
	lines := strings.Split(strings.TrimRight(string(l.tail), "\n"), "\n")
	l.mu.Unlock()
	if len(lines) == 1 && lines[0] == "" {
		return fmt.Sprintf("(%s wrote no output)", l.name)
	}
	if len(lines) > logTailLines {
		lines = lines[len(lines)-logTailLines:]
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "last %d lines of %s's output:", len(lines), l.name)
	for _, line := range lines {
		b.WriteString("\n    ")
		b.WriteString(line)
	}
	return b.String()
}

func (l *processLog) close() error {
	if l == nil || l.file == nil {
		return nil
	}
	return l.file.Close()
}

// closeLogs closes every log, for the end of a control plane.
func closeLogs(logs ...*processLog) error {
	var errs []error
	for _, l := range logs {
		errs = append(errs, l.close())
	}
	return errors.Join(errs...)
}
