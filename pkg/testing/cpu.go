package testing

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTicks is the unit of /proc/<pid>/stat's CPU times: USER_HZ, 100 on
// every Linux architecture Go runs on.
const clockTicks = 100

// ProcessCPU is the CPU time, user and system, that process pid has used,
// read from /proc (Linux only). The bench reads it before and after a run,
// which costs the process nothing, where scraping its metrics would.
func ProcessCPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("reading the CPU time of process %d: %w", pid, err)
	}
	// The command name, field 2, is in parentheses and may hold spaces:
	// the fields that follow it are counted from its closing one.
	end := bytes.LastIndexByte(data, ')')
	if end < 0 {
		return 0, fmt.Errorf("reading the CPU time of process %d: no command name in %q", pid, data)
	}
	fields := strings.Fields(string(data[end+1:]))
	// utime and stime are fields 14 and 15; fields[0] is field 3.
	if len(fields) < 13 {
		return 0, fmt.Errorf("reading the CPU time of process %d: %d fields", pid, len(fields))
	}
	var ticks int64
	for _, f := range fields[11:13] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("reading the CPU time of process %d: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// APIServerPID is the process ID of the control plane's kube-apiserver,
// found by the port it serves on (Linux only).
func (c *ControlPlane) APIServerPID() (int, error) {
	return c.findProcess("kube-apiserver", "--secure-port="+c.env.ControlPlane.APIServer.SecureServing.ListenAddr.Port)
}

// EtcdPID is the process ID of the control plane's etcd, found by the URL
// it serves clients on (Linux only).
func (c *ControlPlane) EtcdPID() (int, error) {
	if c.env.ControlPlane.Etcd == nil || c.env.ControlPlane.Etcd.URL == nil {
		return 0, fmt.Errorf("control plane %s: etcd has not started", c.name)
	}
	return c.findProcess("etcd", "--listen-client-urls="+c.env.ControlPlane.Etcd.URL.String())
}

// findProcess is the process ID of the running binary that was given the
// argument want.
func (c *ControlPlane) findProcess(binary, want string) (int, error) {
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		return 0, err
	}
	for _, dir := range dirs {
		cmdline, err := os.ReadFile(filepath.Join(dir, "cmdline"))
		if err != nil {
			continue // gone meanwhile, or not ours to read
		}
		args := strings.Split(string(cmdline), "\x00")
		if filepath.Base(args[0]) != binary {
			continue
		}
		for _, a := range args[1:] {
			if a == want {
				return strconv.Atoi(filepath.Base(dir))
			}
		}
	}
	return 0, fmt.Errorf("no %s process with %s in control plane %s", binary, want, c.name)
}
