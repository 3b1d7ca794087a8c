//go:build !amd64 || purego

package cpu

var arithForceGo bool

func arithVVVec32(op ArithOp, a, b, o []float32) int                   { return 0 }
func arithVSVec32(op ArithOp, a []float32, s float32, o []float32) int { return 0 }
func arithSVVec32(op ArithOp, s float32, b, o []float32) int           { return 0 }
func sqrtVec32(a, o []float32) int                                     { return 0 }
func reluVec32(a, o []float32) int                                     { return 0 }
func scaleShiftVec32(a, o []float32, mul, add float32) int             { return 0 }
func scaleShiftReluVec32(a, o []float32, mul, add float32) int         { return 0 }

func scaleShiftColsVec32(d []float32, stride, cols int, mul, add []float32, relu bool) bool {
	return len(mul) == 0
}

func dotVec32(a, b []float32) (float32, int) { return 0, 0 }

func maxNaNVec32(o, x []float32) int { return 0 }

func maxNaN3Vec32(o, a, b, c []float32) int { return 0 }

func maxNaN3s2Vec32(o, v []float32) int { return 0 }

func max2s2Vec32(o, v []float32) int { return 0 }

func gatherEvenRowsVec32(o, v []float32, wo, rows, ld int) bool { return false }

func dotVec32x2(a, b0, b1 []float32) (float32, float32, int) { return 0, 0, 0 }

func dotVec32x4(a, b0, b1, b2, b3 []float32) (s [4]float32, n int) { return s, 0 }
