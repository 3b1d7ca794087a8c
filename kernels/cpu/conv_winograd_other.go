//go:build !amd64 || purego

package cpu

import "unsafe"

var winoVec = false

func winoIn8AVX(r0, r1, r2, r3, dst unsafe.Pointer, stride int) { panic("unreachable") }

func winoOut8AVX(src unsafe.Pointer, stride int, y0, y1 unsafe.Pointer, b float32) {
	panic("unreachable")
}

func winoIn4AVX(r0, r1, r2, r3, dst unsafe.Pointer, stride int) { panic("unreachable") }

func winoOut4AVX(src unsafe.Pointer, stride int, y0, y1 unsafe.Pointer, b float32) {
	panic("unreachable")
}
