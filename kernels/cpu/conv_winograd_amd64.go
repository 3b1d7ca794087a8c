//go:build amd64 && !purego

package cpu

import "unsafe"

// Implemented in conv_winograd_amd64.s (AVX2).

//go:noescape
func winoIn8AVX(r0, r1, r2, r3, dst unsafe.Pointer, stride int)

//go:noescape
func winoIn4AVX(r0, r1, r2, r3, dst unsafe.Pointer, stride int)

//go:noescape
func winoOut4AVX(src unsafe.Pointer, stride int, y0, y1 unsafe.Pointer, b float32)

//go:noescape
func winoOut8AVX(src unsafe.Pointer, stride int, y0, y1 unsafe.Pointer, b float32)

// winoVec reports whether the eight-tile transforms run here (tests turn them off to
// compare them with the Go loops).
var winoVec = gemmHasAVX2FMA
