//go:build !linux

package cpu

func hugePages[T any](s []T) error { return nil }

// HugePages advises a large, not yet written buffer onto huge pages: Linux only.
func HugePages(b []byte) {}
