package main

import "syscall"

// workerSysProcAttr puts a worker of `ppc run --nproc` in its own process group, so that a
// Ctrl-C at the terminal reaches only the launcher (which forwards it once, as SIGTERM), and
// has the kernel kill it when the launcher dies, so that no worker outlives a killed launcher.
func workerSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
