//go:build unix && !linux

package main

import "syscall"

// workerSysProcAttr puts a worker of `ppc run --nproc` in its own process group, so that a
// Ctrl-C at the terminal reaches only the launcher (which forwards it once, as SIGTERM).
// Only Linux can have the kernel kill the workers of a launcher that died.
func workerSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
