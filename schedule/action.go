package schedule

import (
	"fmt"
	"strconv"
	"strings"
)

// Kind is the computation type of an Action (PyTorch's _ComputationType).
type Kind uint8

// The action kinds. Idle is the zero Kind: an empty CSV cell.
const (
	Idle           Kind = iota // empty cell: no action
	Forward                    // F: forward of one micro-batch through one stage
	BackwardInput              // I: gradient with respect to the stage input
	BackwardWeight             // W: gradient with respect to the stage weights
	FullBackward               // B: I and W in one action (legacy spelling BW)
	SendF                      // SEND_F: send the forward output; Stage is the sending stage
	RecvF                      // RECV_F: receive the forward input; Stage is the receiving stage
	SendB                      // SEND_B: send the input gradient; Stage is the sending stage
	RecvB                      // RECV_B: receive the output gradient; Stage is the receiving stage
	ReduceGrad                 // REDUCE_GRAD: cross-micro-batch gradient reduction of a stage (no micro-batch)
	Unshard                    // UNSHARD: FSDP all-gather of a stage's weights (no micro-batch; zero cost here)
	Reshard                    // RESHARD: FSDP release of a stage's weights (no micro-batch; zero cost here)
	OverlapFB                  // OVERLAP_F_B: a forward and a backward run overlapped; see Action.Sub
	numKinds
)

var kindTokens = [numKinds]string{
	Idle:           "",
	Forward:        "F",
	BackwardInput:  "I",
	BackwardWeight: "W",
	FullBackward:   "B",
	SendF:          "SEND_F",
	RecvF:          "RECV_F",
	SendB:          "SEND_B",
	RecvB:          "RECV_B",
	ReduceGrad:     "REDUCE_GRAD",
	Unshard:        "UNSHARD",
	Reshard:        "RESHARD",
	OverlapFB:      "OVERLAP_F_B",
}

// String returns the token the grammar uses for k ("F", "SEND_F", ...; "" for Idle).
func (k Kind) String() string {
	if k < numKinds {
		return kindTokens[k]
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// IsCompute reports whether k is a computation (F, I, W, B or OVERLAP_F_B) —
// PyTorch's is_compute_op, the only kinds allowed in the compute_only format.
func (k Kind) IsCompute() bool {
	switch k {
	case Forward, BackwardInput, BackwardWeight, FullBackward, OverlapFB:
		return true
	}
	return false
}

// IsComm reports whether k is a point-to-point communication (SEND_F, RECV_F, SEND_B, RECV_B).
func (k Kind) IsComm() bool { return k >= SendF && k <= RecvB }

// hasMicrobatch reports whether actions of kind k carry a micro-batch index.
func (k Kind) hasMicrobatch() bool {
	switch k {
	case Forward, BackwardInput, BackwardWeight, FullBackward, SendF, RecvF, SendB, RecvB:
		return true
	}
	return false
}

// NoMicrobatch is the Microbatch of actions that have none (REDUCE_GRAD,
// UNSHARD, RESHARD and the OVERLAP_F_B container).
const NoMicrobatch = -1

// MaxIndex bounds the stage and micro-batch numbers ParseAction accepts.
const MaxIndex = 1<<24 - 1

// Action is one entry of a rank's action list.
//
// The zero Action is Idle. For OVERLAP_F_B, Stage and Microbatch are -1 and
// Sub holds the two overlapped computations in written order: one Forward and
// one FullBackward or BackwardInput. Sub is nil for every other kind.
type Action struct {
	Kind       Kind
	Stage      int
	Microbatch int
	Sub        []Action
}

// Act returns the action {stage}{kind}{mb}. For kinds without a micro-batch
// (REDUCE_GRAD, UNSHARD, RESHARD) mb is ignored.
func Act(kind Kind, stage, mb int) Action {
	if !kind.hasMicrobatch() {
		mb = NoMicrobatch
	}
	return Action{Kind: kind, Stage: stage, Microbatch: mb}
}

// Overlap returns the OVERLAP_F_B action that runs a and b overlapped.
func Overlap(a, b Action) Action {
	return Action{Kind: OverlapFB, Stage: -1, Microbatch: NoMicrobatch, Sub: []Action{a, b}}
}

// IsIdle reports whether a is the empty action.
func (a Action) IsIdle() bool { return a.Kind == Idle }

// Computes returns the computations a performs: a itself for F, I, W and B,
// the two sub-actions for OVERLAP_F_B, nothing otherwise.
func (a Action) Computes() []Action {
	switch a.Kind {
	case OverlapFB:
		return a.Sub
	case Forward, BackwardInput, BackwardWeight, FullBackward:
		return []Action{a}
	}
	return nil
}

// Equal reports whether a and b are the same action.
func (a Action) Equal(b Action) bool {
	if a.Kind != b.Kind || a.Stage != b.Stage || a.Microbatch != b.Microbatch || len(a.Sub) != len(b.Sub) {
		return false
	}
	for i := range a.Sub {
		if !a.Sub[i].Equal(b.Sub[i]) {
			return false
		}
	}
	return true
}

// String returns the grammar form of a: "1F3", "0SEND_F2", "2REDUCE_GRAD",
// "(0F7;7B3)OVERLAP_F_B", or "" for Idle. ParseAction(a.String()) == a.
func (a Action) String() string {
	var b strings.Builder
	a.appendTo(&b)
	return b.String()
}

func (a Action) appendTo(b *strings.Builder) {
	switch {
	case a.Kind == Idle:
	case a.Kind == OverlapFB:
		b.WriteByte('(')
		for i, s := range a.Sub {
			if i > 0 {
				b.WriteByte(';')
			}
			s.appendTo(b)
		}
		b.WriteString(")OVERLAP_F_B")
	default:
		b.WriteString(strconv.Itoa(a.Stage))
		b.WriteString(a.Kind.String())
		if a.Kind.hasMicrobatch() {
			b.WriteString(strconv.Itoa(a.Microbatch))
		}
	}
}

// MarshalText implements encoding.TextMarshaler (the grammar form).
func (a Action) MarshalText() ([]byte, error) { return []byte(a.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler via ParseAction.
func (a *Action) UnmarshalText(text []byte) error {
	p, err := ParseAction(string(text))
	if err != nil {
		return err
	}
	*a = p
	return nil
}

// kindsByToken lists the tokens after the stage number, longest first so that
// "BW" wins over "B" and "SEND_F" is not read as "S...".
var kindsByToken = []struct {
	tok  string
	kind Kind
}{
	{"REDUCE_GRAD", ReduceGrad},
	{"OVERLAP_F_B", OverlapFB},
	{"UNSHARD", Unshard},
	{"RESHARD", Reshard},
	{"SEND_F", SendF},
	{"RECV_F", RecvF},
	{"SEND_B", SendB},
	{"RECV_B", RecvB},
	{"BW", FullBackward}, // PyTorch 2.4's spelling of the full backward
	{"F", Forward},
	{"I", BackwardInput},
	{"W", BackwardWeight},
	{"B", FullBackward},
}

const validKinds = "F, I, W, B, SEND_F, RECV_F, SEND_B, RECV_B, REDUCE_GRAD, UNSHARD, RESHARD or (a;b)OVERLAP_F_B"

// ParseAction parses one cell of PyTorch's schedule grammar:
//
//	{stage}{F|I|W|B|BW}{mb}   {stage}{SEND_F|RECV_F|SEND_B|RECV_B}{mb}
//	{stage}{REDUCE_GRAD|UNSHARD|RESHARD}   ({F action};{B or I action})OVERLAP_F_B
//
// Surrounding white space is ignored; an empty string is Idle. Unlike
// PyTorch's prefix match, trailing text is an error, and so are a missing or
// superfluous micro-batch and numbers above MaxIndex.
func ParseAction(s string) (Action, error) {
	t := strings.TrimSpace(s)
	a, err := parseAction(t, true)
	if err != nil {
		return Action{}, fmt.Errorf("invalid action %q: %s", t, err)
	}
	return a, nil
}

func parseAction(t string, allowOverlap bool) (Action, error) {
	if t == "" {
		return Action{}, nil
	}
	if t[0] == '(' {
		if !allowOverlap {
			return Action{}, fmt.Errorf("nested OVERLAP_F_B")
		}
		return parseOverlap(t)
	}
	stage, rest, err := parseIndex(t, "stage")
	if err != nil {
		return Action{}, err
	}
	kind := Idle
	for _, k := range kindsByToken {
		if strings.HasPrefix(rest, k.tok) {
			kind, rest = k.kind, rest[len(k.tok):]
			break
		}
	}
	switch kind {
	case Idle:
		return Action{}, fmt.Errorf("unknown action kind %q (want %s)", rest, validKinds)
	case OverlapFB:
		return Action{}, fmt.Errorf("OVERLAP_F_B takes its actions in parentheses, as (0F1;3B0)OVERLAP_F_B")
	}
	if !kind.hasMicrobatch() {
		if rest != "" {
			return Action{}, fmt.Errorf("%s takes no micro-batch, found %q after it", kind, rest)
		}
		return Act(kind, stage, NoMicrobatch), nil
	}
	if rest == "" {
		return Action{}, fmt.Errorf("%s needs a micro-batch number", kind)
	}
	mb, rest, err := parseIndex(rest, "micro-batch")
	if err != nil {
		return Action{}, err
	}
	if rest != "" {
		return Action{}, fmt.Errorf("unexpected %q after the micro-batch number", rest)
	}
	return Act(kind, stage, mb), nil
}

// parseIndex reads the leading decimal number of t.
func parseIndex(t, what string) (int, string, error) {
	n := 0
	for n < len(t) && t[n] >= '0' && t[n] <= '9' {
		n++
	}
	if n == 0 {
		if t != "" && t[0] == '-' {
			return 0, "", fmt.Errorf("negative %s number", what)
		}
		return 0, "", fmt.Errorf("want a %s number, found %q", what, t)
	}
	digits := strings.TrimLeft(t[:n], "0")
	if len(digits) > 8 {
		return 0, "", fmt.Errorf("%s number %s is too large (max %d)", what, t[:n], MaxIndex)
	}
	v := 0
	for _, c := range digits {
		v = v*10 + int(c-'0')
	}
	if v > MaxIndex {
		return 0, "", fmt.Errorf("%s number %d is too large (max %d)", what, v, MaxIndex)
	}
	return v, t[n:], nil
}

func parseOverlap(t string) (Action, error) {
	end := strings.IndexByte(t, ')')
	if end < 0 {
		return Action{}, fmt.Errorf("missing ')'")
	}
	if k := t[end+1:]; k != "OVERLAP_F_B" {
		return Action{}, fmt.Errorf("want OVERLAP_F_B after ')', found %q", k)
	}
	var subs []Action
	for _, part := range strings.Split(t[1:end], ";") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		a, err := parseAction(part, false)
		if err != nil {
			return Action{}, fmt.Errorf("in %q: %s", part, err)
		}
		subs = append(subs, a)
	}
	if len(subs) != 2 {
		return Action{}, fmt.Errorf("OVERLAP_F_B needs exactly two actions (an F and a B or I), found %d", len(subs))
	}
	var nf, nb int
	for _, a := range subs {
		switch a.Kind {
		case Forward:
			nf++
		case FullBackward, BackwardInput:
			nb++
		default:
			return Action{}, fmt.Errorf("OVERLAP_F_B can only overlap F with B or I, found %s", a)
		}
	}
	if nf != 1 || nb != 1 {
		return Action{}, fmt.Errorf("OVERLAP_F_B needs one F and one B or I, found %s and %s", subs[0], subs[1])
	}
	return Overlap(subs[0], subs[1]), nil
}
