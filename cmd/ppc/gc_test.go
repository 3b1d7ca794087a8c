package main

import (
	"runtime/debug"
	"testing"
)

// Once a large arena is live, `ppc run` gives the collector gcHeadroomBytes of headroom
// instead of GOGC's 100% of the live heap, unless GOGC is set.
func TestGCHeadroom(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	arena := make([]byte, 8*gcHeadroomBytes)
	arena[len(arena)-1] = 1
	gcHeadroom(func(string) string { return "" })
	if pct := debug.SetGCPercent(100); pct >= 100 || pct < 1 {
		t.Errorf("with %d MiB live, GC percent %d, want about %d", len(arena)>>20, pct, 100/8)
	}
	gcHeadroom(func(k string) string {
		if k == "GOGC" {
			return "50"
		}
		return ""
	})
	if pct := debug.SetGCPercent(100); pct != 100 {
		t.Errorf("GOGC set: GC percent changed to %d", pct)
	}
	_ = arena[0]
}
