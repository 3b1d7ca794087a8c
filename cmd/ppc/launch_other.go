//go:build !unix

package main

import "syscall"

// workerSysProcAttr: no process groups to separate the workers from the launcher's.
func workerSysProcAttr() *syscall.SysProcAttr { return nil }
