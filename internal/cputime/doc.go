// Package cputime reads the process's CPU time, for benchmarks that report work per
// CPU-second as well as per wall-second (robust to a loaded machine, where wall time is not).
package cputime
