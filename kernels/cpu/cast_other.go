//go:build !amd64 || purego

package cpu

var castForceGo bool

func castNarrowVec(dst []uint16, src []float32, half bool) int   { return 0 }
func castWidenVec(dst []float32, src []uint16, half bool) int    { return 0 }
func castNarrowVec64(dst []uint16, src []float64, half bool) int { return 0 }
func castWidenF16Vec64(dst []float64, src []uint16) int          { return 0 }
