package ir

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Init is a parsed parameter initialiser, the value of AttrInit.
type Init struct {
	Kind string  // "zeros", "ones", "normal" or "uniform"
	A, B float64 // normal: A is the standard deviation; uniform: values in [A, B)
}

const initForms = "want normal(STD), uniform(A, B), zeros or ones"

// ParseInit reads an initialiser: "normal(STD)", "uniform(A, B)", "zeros" or "ones" ("" is
// zeros). It is the one reading of the string: the parser and the verifier check it with it,
// so a bad initialiser is reported with its position at compile time, and the runtime fills
// buffers from what it returns.
func ParseInit(s string) (Init, error) {
	s = strings.TrimSpace(s)
	switch s {
	case "zeros", "":
		return Init{Kind: "zeros"}, nil
	case "ones":
		return Init{Kind: "ones"}, nil
	}
	name, rest, ok := strings.Cut(s, "(")
	name = strings.TrimSpace(name)
	if !ok || !strings.HasSuffix(rest, ")") || (name != "normal" && name != "uniform") {
		return Init{}, fmt.Errorf("bad initialiser %q (%s)", s, initForms)
	}
	var args []float64
	for _, f := range strings.Split(strings.TrimSuffix(rest, ")"), ",") {
		f = strings.TrimSpace(f)
		v, err := strconv.ParseFloat(f, 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
			return Init{}, fmt.Errorf("bad initialiser %q: %q is not a finite number (%s)", s, f, initForms)
		}
		args = append(args, v)
	}
	switch {
	case name == "normal" && len(args) != 1:
		return Init{}, fmt.Errorf("bad initialiser %q: normal takes 1 argument (the standard deviation), got %d", s, len(args))
	case name == "normal" && args[0] < 0:
		return Init{}, fmt.Errorf("bad initialiser %q: the standard deviation must not be negative", s)
	case name == "normal":
		return Init{Kind: "normal", A: args[0]}, nil
	case len(args) != 2:
		return Init{}, fmt.Errorf("bad initialiser %q: uniform takes 2 arguments (the bounds A, B), got %d", s, len(args))
	case args[0] > args[1]:
		return Init{}, fmt.Errorf("bad initialiser %q: the lower bound %g is above the upper bound %g", s, args[0], args[1])
	}
	return Init{Kind: "uniform", A: args[0], B: args[1]}, nil
}
