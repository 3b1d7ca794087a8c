//go:build unix

package main

import (
	"os"
	"syscall"
)

// processGroupLeader reports whether this process leads its own process group (as the
// workers of `ppc run --nproc` do, out of reach of the terminal's Ctrl-C).
func processGroupLeader() bool { return syscall.Getpgrp() == os.Getpid() }
