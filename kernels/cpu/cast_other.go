//go:build !amd64 || purego

package cpu

var castForceGo bool

func castNarrowVec(dst []uint16, src []float32, half bool) int { return 0 }
func castWidenVec(dst []float32, src []uint16, half bool) int  { return 0 }
