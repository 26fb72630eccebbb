package testing

import (
	"os/exec"
	"syscall"
)

// dieWithParent has the kernel kill cmd's process when this process
// ends, however it ends: a test binary killed by its timeout leaves no
// node, kubelet or container running.
func dieWithParent(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
