//go:build !amd64 || purego

package cpu

var geluTanhForceGo bool

func geluTanhVec(dst, x []float64) int { return 0 }

func geluTanhGradVec(dst, x, dy []float64) int { return 0 }
