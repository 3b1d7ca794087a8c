package filecheck

import (
	"errors"
	"regexp/syntax"
	"unicode"
	"unicode/utf8"
)

// Go's regexp package has no backreferences, so a pattern that uses a
// variable in the same directive that defines it ("[[R:%[0-9]+]] = add [[R]]")
// is matched by this small backtracking interpreter over the parsed regexp.
// Each use is an empty placeholder capture group in the tree; the interpreter
// matches the text captured by the definition's group there instead. It
// follows Go's leftmost-first (Perl) preference order, so captures agree with
// package regexp's. A step budget bounds pathological patterns.

const backtrackLimit = 1 << 20

var errTooComplex = errors.New("pattern too complex: backtracking limit exceeded while matching a variable used in the directive that defines it")

type backtracker struct {
	s        string
	caps     []int
	backrefs map[int]int
	steps    int
	exceeded bool
}

// backtrackSearch returns the capture positions (caps[0:2] is the whole match)
// of the leftmost match of re in s, honouring backrefs (placeholder group ->
// defining group).
func backtrackSearch(re *syntax.Regexp, backrefs map[int]int, s string) ([]int, bool, error) {
	m := &backtracker{s: s, caps: make([]int, 2*(re.MaxCap()+1)), backrefs: backrefs}
	for i := 0; ; {
		for j := range m.caps {
			m.caps[j] = -1
		}
		end := -1
		if m.match(re, i, func(j int) bool { end = j; return true }) {
			m.caps[0], m.caps[1] = i, end
			return m.caps, true, nil
		}
		if m.exceeded {
			return nil, false, errTooComplex
		}
		if i >= len(s) {
			return nil, false, nil
		}
		_, w := utf8.DecodeRuneInString(s[i:])
		i += w
	}
}

func (m *backtracker) match(re *syntax.Regexp, i int, k func(int) bool) bool {
	if m.exceeded {
		return false
	}
	m.steps++
	if m.steps > backtrackLimit {
		m.exceeded = true
		return false
	}
	s := m.s
	switch re.Op {
	case syntax.OpNoMatch:
		return false
	case syntax.OpEmptyMatch:
		return k(i)
	case syntax.OpLiteral:
		fold := re.Flags&syntax.FoldCase != 0
		for _, r := range re.Rune {
			if i >= len(s) {
				return false
			}
			c, w := utf8.DecodeRuneInString(s[i:])
			if c != r && !(fold && equalFold(c, r)) {
				return false
			}
			i += w
		}
		return k(i)
	case syntax.OpCharClass:
		if i >= len(s) {
			return false
		}
		c, w := utf8.DecodeRuneInString(s[i:])
		if !inClass(re.Rune, c) {
			return false
		}
		return k(i + w)
	case syntax.OpAnyCharNotNL, syntax.OpAnyChar:
		if i >= len(s) || (re.Op == syntax.OpAnyCharNotNL && s[i] == '\n') {
			return false
		}
		_, w := utf8.DecodeRuneInString(s[i:])
		return k(i + w)
	case syntax.OpBeginLine:
		return (i == 0 || s[i-1] == '\n') && k(i)
	case syntax.OpEndLine:
		return (i == len(s) || s[i] == '\n') && k(i)
	case syntax.OpBeginText:
		return i == 0 && k(i)
	case syntax.OpEndText:
		return i == len(s) && k(i)
	case syntax.OpWordBoundary:
		return m.wordBoundary(i) && k(i)
	case syntax.OpNoWordBoundary:
		return !m.wordBoundary(i) && k(i)
	case syntax.OpCapture:
		if def, ok := m.backrefs[re.Cap]; ok {
			a, b := m.caps[2*def], m.caps[2*def+1]
			if a < 0 || b < 0 {
				return false
			}
			v := s[a:b]
			if len(s)-i < len(v) || s[i:i+len(v)] != v {
				return false
			}
			return k(i + len(v))
		}
		c := re.Cap
		old0, old1 := m.caps[2*c], m.caps[2*c+1]
		if m.match(re.Sub[0], i, func(j int) bool {
			p0, p1 := m.caps[2*c], m.caps[2*c+1]
			m.caps[2*c], m.caps[2*c+1] = i, j
			if k(j) {
				return true
			}
			m.caps[2*c], m.caps[2*c+1] = p0, p1
			return false
		}) {
			return true
		}
		m.caps[2*c], m.caps[2*c+1] = old0, old1
		return false
	case syntax.OpConcat:
		return m.seq(re.Sub, i, k)
	case syntax.OpAlternate:
		for _, sub := range re.Sub {
			if m.match(sub, i, k) {
				return true
			}
			if m.exceeded {
				return false
			}
		}
		return false
	case syntax.OpStar:
		return m.repeat(re.Sub[0], 0, -1, re.Flags&syntax.NonGreedy == 0, i, 0, k)
	case syntax.OpPlus:
		return m.repeat(re.Sub[0], 1, -1, re.Flags&syntax.NonGreedy == 0, i, 0, k)
	case syntax.OpQuest:
		return m.repeat(re.Sub[0], 0, 1, re.Flags&syntax.NonGreedy == 0, i, 0, k)
	case syntax.OpRepeat:
		return m.repeat(re.Sub[0], re.Min, re.Max, re.Flags&syntax.NonGreedy == 0, i, 0, k)
	}
	return false
}

func (m *backtracker) seq(subs []*syntax.Regexp, i int, k func(int) bool) bool {
	if len(subs) == 0 {
		return k(i)
	}
	return m.match(subs[0], i, func(j int) bool { return m.seq(subs[1:], j, k) })
}

// repeat matches sub between min and max (-1: unbounded) times; n iterations
// have been matched so far. Like package regexp (which compiles x* as (x+)?
// and never revisits a loop at the same position), an iteration that matches
// the empty string is allowed only as the first one or to reach min; this
// keeps (a*)* from looping forever and gives the same captures as regexp.
func (m *backtracker) repeat(sub *syntax.Regexp, min, max int, greedy bool, i, n int, k func(int) bool) bool {
	more := func() bool {
		if max >= 0 && n >= max {
			return false
		}
		return m.match(sub, i, func(j int) bool {
			if j == i && n >= 1 && n >= min {
				return false
			}
			return m.repeat(sub, min, max, greedy, j, n+1, k)
		})
	}
	switch {
	case n < min:
		return more()
	case greedy:
		return more() || (!m.exceeded && k(i))
	default:
		return k(i) || (!m.exceeded && more())
	}
}

func (m *backtracker) wordBoundary(i int) bool {
	before, after := false, false
	if i > 0 {
		r, _ := utf8.DecodeLastRuneInString(m.s[:i])
		before = syntax.IsWordChar(r)
	}
	if i < len(m.s) {
		r, _ := utf8.DecodeRuneInString(m.s[i:])
		after = syntax.IsWordChar(r)
	}
	return before != after
}

func inClass(ranges []rune, c rune) bool {
	for j := 0; j+1 < len(ranges); j += 2 {
		if ranges[j] <= c && c <= ranges[j+1] {
			return true
		}
	}
	return false
}

func equalFold(a, b rune) bool {
	for r := unicode.SimpleFold(a); r != a; r = unicode.SimpleFold(r) {
		if r == b {
			return true
		}
	}
	return false
}
