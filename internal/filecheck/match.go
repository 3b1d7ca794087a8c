package filecheck

import (
	"errors"
	"fmt"
	"regexp"
	"regexp/syntax"
	"strconv"
	"strings"
)

// Match checks output against the directives. On failure the error message
// names the failing directive (file:line and text), where matching stopped
// (output line number and text, or "end of output"), for a CHECK-NOT the
// output line holding the forbidden text, for an undefined [[VAR]] that fact,
// the values of the variables the pattern used, and finally the whole output
// with line numbers.
func Match(dirs []Directive, output string) error {
	if len(dirs) == 0 {
		return errors.New("filecheck: no CHECK directives to match")
	}
	pats := make([]*pattern, len(dirs))
	var errs []error
	sawPositive := false
	for i, d := range dirs {
		p, err := checkDirective(d, sawPositive)
		if err != nil {
			errs = append(errs, err)
		}
		pats[i] = p
		if d.Kind != Not {
			sawPositive = true
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	m := newMatcher(dirs, pats, output)
	return m.run()
}

// Run parses the directives in checks (see Parse) and matches output against
// them (see Match).
func Run(file, checks string, lineOffset int, output string) error {
	dirs, err := Parse(file, checks, lineOffset)
	if err != nil {
		return err
	}
	return Match(dirs, output)
}

// pos is a point in the output: a 0-based line and a byte column in that
// line's canonical (whitespace-collapsed) form.
type pos struct{ line, col int }

// span is one match: on line, canonical columns [start, end).
type span struct {
	line, start, end int
	caps             map[string]string
}

func (s span) startPos() pos { return pos{s.line, s.start} }
func (s span) endPos() pos   { return pos{s.line, s.end} }

type matcher struct {
	dirs   []Directive
	pats   []*pattern
	output string
	orig   []string // output lines as given (for messages)
	lines  []string // canonical output lines (for matching)
	vars   map[string]string
	res    map[string]*regexp.Regexp
	trees  map[string]*syntax.Regexp

	closing int // index of the CHECK-LABEL that ends the current block, or len(dirs)
}

func newMatcher(dirs []Directive, pats []*pattern, output string) *matcher {
	orig := strings.Split(output, "\n")
	if len(orig) > 1 && orig[len(orig)-1] == "" {
		orig = orig[:len(orig)-1]
	}
	lines := make([]string, len(orig))
	for i, l := range orig {
		lines[i] = canonWS(strings.TrimSuffix(l, "\r"))
	}
	return &matcher{
		dirs:   dirs,
		pats:   pats,
		output: output,
		orig:   orig,
		lines:  lines,
		vars:   map[string]string{},
		res:    map[string]*regexp.Regexp{},
		trees:  map[string]*syntax.Regexp{},
	}
}

func (m *matcher) endPos() pos {
	last := len(m.lines) - 1
	return pos{last, len(m.lines[last])}
}

func (m *matcher) run() error {
	cur := pos{}   // where the next search starts
	prevLine := -1 // line of the previous positive match
	for i := 0; i < len(m.dirs); {
		j := i
		for j < len(m.dirs) && m.dirs[j].Kind != Label {
			j++
		}
		end := m.endPos()
		m.closing = j
		var label span
		if j < len(m.dirs) {
			var err error
			if label, err = m.matchCheck(j, cur, m.endPos(), len(m.dirs)); err != nil {
				return err
			}
			end = label.startPos()
		}
		var nots []int
		for k := i; k < j; k++ {
			if m.dirs[k].Kind == Not {
				nots = append(nots, k)
				continue
			}
			var (
				sp  span
				err error
			)
			switch m.dirs[k].Kind {
			case Check:
				sp, err = m.matchCheck(k, cur, end, j)
			case Next:
				sp, err = m.matchNext(k, cur, end, prevLine)
			case Same:
				sp, err = m.matchSame(k, cur, end, prevLine)
			}
			if err != nil {
				return err
			}
			if err := m.checkNots(nots, cur, sp.startPos(), k); err != nil {
				return err
			}
			nots = nil
			for name, v := range sp.caps {
				m.vars[name] = v
			}
			cur, prevLine = sp.endPos(), sp.line
		}
		if err := m.checkNots(nots, cur, end, j); err != nil {
			return err
		}
		if j < len(m.dirs) {
			cur, prevLine = label.endPos(), label.line
		}
		i = j + 1
	}
	return nil
}

// instantiate builds directive k's pattern with the current variables.
func (m *matcher) instantiate(k int, from pos) (*built, error) {
	b, err := m.pats[k].build(m.vars)
	if err != nil {
		var uv *undefinedVarError
		if errors.As(err, &uv) {
			var notes []string
			if m.dirs[k].Kind == Label && m.definedBefore(uv.name, k) {
				notes = append(notes, fmt.Sprintf("a %s is matched before the directives of the block it closes, so it can only use variables defined before the previous %s", Label, Label))
			}
			return nil, m.fail(k, []int{from.line}, "%v; matching stopped %s%s", err, m.where(from), m.notes(nil, notes))
		}
		return nil, m.fail(k, nil, "%v", err)
	}
	return b, nil
}

// definedBefore reports whether a positive directive before k defines name.
func (m *matcher) definedBefore(name string, k int) bool {
	for i := 0; i < k; i++ {
		if m.dirs[i].Kind == Not {
			continue
		}
		for _, d := range m.pats[i].defs {
			if d == name {
				return true
			}
		}
	}
	return false
}

// searchLine looks for b in canonical line l between columns lo and hi.
func (m *matcher) searchLine(k int, b *built, l, lo, hi int) (span, bool, error) {
	if l < 0 || l >= len(m.lines) || lo > hi {
		return span{}, false, nil
	}
	s := m.lines[l][lo:hi]
	var loc []int
	if b.backrefs == nil {
		re, err := m.regexp(b.src)
		if err != nil {
			return span{}, false, m.fail(k, nil, "cannot compile pattern: %v", err)
		}
		loc = re.FindStringSubmatchIndex(s)
	} else {
		pre, err := m.regexp(b.prefilter)
		if err != nil {
			return span{}, false, m.fail(k, nil, "cannot compile pattern: %v", err)
		}
		if !pre.MatchString(s) {
			return span{}, false, nil
		}
		tree, ok := m.trees[b.src]
		if !ok {
			if tree, err = syntax.Parse(b.src, syntax.Perl); err != nil {
				return span{}, false, m.fail(k, nil, "cannot compile pattern: %v", err)
			}
			m.trees[b.src] = tree
		}
		var found bool
		loc, found, err = backtrackSearch(tree, b.backrefs, s)
		if err != nil {
			return span{}, false, m.fail(k, []int{l}, "%v (on output line %d)", err, l+1)
		}
		if !found {
			loc = nil
		}
	}
	if loc == nil {
		return span{}, false, nil
	}
	sp := span{line: l, start: lo + loc[0], end: lo + loc[1]}
	if len(b.groups) > 0 {
		sp.caps = make(map[string]string, len(b.groups))
		for name, g := range b.groups {
			if a, z := loc[2*g], loc[2*g+1]; a >= 0 && z >= 0 {
				sp.caps[name] = s[a:z]
			} else {
				sp.caps[name] = ""
			}
		}
	}
	return sp, true, nil
}

func (m *matcher) regexp(src string) (*regexp.Regexp, error) {
	if re, ok := m.res[src]; ok {
		return re, nil
	}
	re, err := regexp.Compile(src)
	if err != nil {
		return nil, err
	}
	m.res[src] = re
	return re, nil
}

// search finds the first match of b in [from, to).
func (m *matcher) search(k int, b *built, from, to pos) (span, bool, error) {
	for l := from.line; l <= to.line && l < len(m.lines); l++ {
		lo, hi := 0, len(m.lines[l])
		if l == from.line {
			lo = from.col
		}
		if l == to.line {
			hi = to.col
		}
		if sp, ok, err := m.searchLine(k, b, l, lo, hi); ok || err != nil {
			return sp, ok, err
		}
	}
	return span{}, false, nil
}

// matchCheck matches a CHECK or CHECK-LABEL directive k in [from, to). blockEnd
// is the index of the label that ends the block (len(dirs) if none), used for
// hints.
func (m *matcher) matchCheck(k int, from, to pos, blockEnd int) (span, error) {
	b, err := m.instantiate(k, from)
	if err != nil {
		return span{}, err
	}
	sp, ok, err := m.search(k, b, from, to)
	if err != nil || ok {
		return sp, err
	}
	var notes []string
	mark := []int{from.line}
	where := m.where(from)
	if blockEnd < len(m.dirs) && to != m.endPos() {
		where += fmt.Sprintf(", up to the %s match on output line %d", m.dirs[blockEnd].loc()+" "+Label.String(), to.line+1)
		if later, ok, _ := m.search(k, b, to, m.endPos()); ok {
			notes = append(notes, fmt.Sprintf("the pattern matches only in a later block, on output line %d: %q", later.line+1, m.orig[later.line]))
			mark = append(mark, later.line)
		}
	}
	if earlier, ok, _ := m.search(k, b, pos{}, from); ok {
		notes = append(notes, fmt.Sprintf("the pattern matches earlier, on output line %d: %q, but directives must match in order", earlier.line+1, m.orig[earlier.line]))
		mark = append(mark, earlier.line)
	} else if l, ok := m.closest(k, from, to); ok {
		notes = append(notes, fmt.Sprintf("possible intended match on output line %d: %q", l+1, m.orig[l]))
		mark = append(mark, l)
	}
	return span{}, m.fail(k, mark, "no match found; search started %s%s", where, m.notes(b, notes))
}

// matchNext matches CHECK-NEXT directive k on the line after prevLine.
func (m *matcher) matchNext(k int, from, to pos, prevLine int) (span, error) {
	b, err := m.instantiate(k, from)
	if err != nil {
		return span{}, err
	}
	want := prevLine + 1
	if want >= len(m.lines) {
		return span{}, m.fail(k, []int{prevLine}, "expected on output line %d, but the previous match was on the last line, %d (end of output)%s",
			want+1, prevLine+1, m.notes(b, nil))
	}
	if want > to.line {
		return span{}, m.fail(k, []int{want}, "expected on output line %d, but the block ends before it, on output line %d where %s %s matched%s",
			want+1, to.line+1, m.dirs[m.closing].loc(), Label, m.notes(b, nil))
	}
	hi := len(m.lines[want])
	if want == to.line {
		hi = to.col
	}
	sp, ok, err := m.searchLine(k, b, want, 0, hi)
	if err != nil || ok {
		return sp, err
	}
	var notes []string
	mark := []int{want}
	if want == to.line && m.closing < len(m.dirs) {
		notes = append(notes, fmt.Sprintf("the block ends on that line, at %q, where %s %s matched", m.lines[want][to.col:], m.dirs[m.closing].loc(), Label))
	}
	if same, ok, _ := m.searchLine(k, b, prevLine, from.col, len(m.lines[prevLine])); ok {
		notes = append(notes, fmt.Sprintf("the pattern matches on the same line as the previous match, output line %d", same.line+1))
	} else if later, ok, _ := m.search(k, b, pos{want + 1, 0}, m.endPos()); ok {
		notes = append(notes, fmt.Sprintf("the first match after the previous one is on output line %d: %q", later.line+1, m.orig[later.line]))
		mark = append(mark, later.line)
	}
	return span{}, m.fail(k, mark, "expected on output line %d, but line %d is %q%s", want+1, want+1, m.orig[want], m.notes(b, notes))
}

// matchSame matches CHECK-SAME directive k on prevLine after from.
func (m *matcher) matchSame(k int, from, to pos, prevLine int) (span, error) {
	b, err := m.instantiate(k, from)
	if err != nil {
		return span{}, err
	}
	hi := len(m.lines[prevLine])
	if prevLine == to.line {
		hi = to.col
	}
	sp, ok, err := m.searchLine(k, b, prevLine, from.col, hi)
	if err != nil || ok {
		return sp, err
	}
	var notes []string
	mark := []int{prevLine}
	if later, ok, _ := m.search(k, b, pos{prevLine + 1, 0}, m.endPos()); ok {
		notes = append(notes, fmt.Sprintf("the first match after the previous one is on another line, output line %d: %q", later.line+1, m.orig[later.line]))
		mark = append(mark, later.line)
	}
	rest := m.lines[prevLine][from.col:]
	return span{}, m.fail(k, mark, "expected on output line %d after the previous match, but the rest of line %d is %q (the line is %q)%s",
		prevLine+1, prevLine+1, rest, m.orig[prevLine], m.notes(b, notes))
}

// checkNots verifies that none of the CHECK-NOT directives nots matches in
// [from, to). next is the index of the directive that ends the region
// (len(dirs) for end of output).
func (m *matcher) checkNots(nots []int, from, to pos, next int) error {
	for _, k := range nots {
		b, err := m.instantiate(k, from)
		if err != nil {
			return err
		}
		sp, ok, err := m.search(k, b, from, to)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		region := "from the start of output"
		if from != (pos{}) {
			region = fmt.Sprintf("from output line %d (after the previous match)", from.line+1)
		}
		if next < len(m.dirs) {
			region += fmt.Sprintf(" to output line %d (where %s %s matched)", to.line+1, m.dirs[next].loc(), m.dirs[next].Kind)
		} else {
			region += " to the end of output"
		}
		return m.fail(k, []int{sp.line}, "forbidden pattern found on output line %d: %q%s", sp.line+1, m.orig[sp.line],
			m.notes(b, []string{"checked region: " + region, fmt.Sprintf("forbidden text: %q", m.lines[sp.line][sp.start:sp.end])}))
	}
	return nil
}

// where describes a search start.
func (m *matcher) where(p pos) string {
	switch {
	case len(m.lines) == 1 && m.lines[0] == "":
		return "in empty output (end of output)"
	case p == m.endPos():
		return "at end of output"
	case p == pos{}:
		return fmt.Sprintf("at the start of output, output line 1: %q", m.orig[0])
	case p.col >= len(m.lines[p.line]):
		return fmt.Sprintf("after the end of output line %d: %q", p.line+1, m.orig[p.line])
	case p.col == 0:
		return fmt.Sprintf("at output line %d: %q", p.line+1, m.orig[p.line])
	}
	return fmt.Sprintf("on output line %d after %q: %q", p.line+1, m.lines[p.line][:p.col], m.orig[p.line])
}

// notes renders hint lines plus the values of variables the pattern used.
func (m *matcher) notes(b *built, notes []string) string {
	var sb strings.Builder
	if b != nil && len(b.used) > 0 {
		sb.WriteString("\n\tnote: with " + strings.Join(b.used, ", "))
	}
	for _, n := range notes {
		sb.WriteString("\n\tnote: " + n)
	}
	return sb.String()
}

// fail formats a match failure for directive k followed by the numbered
// output, marking the lines in mark.
func (m *matcher) fail(k int, mark []int, format string, args ...any) error {
	var sb strings.Builder
	sb.WriteString(m.dirs[k].errorf(format, args...).Error())
	sb.WriteString("\noutput:\n")
	if m.output == "" {
		sb.WriteString("\t(empty output)\n")
		return errors.New(sb.String())
	}
	marked := map[int]bool{}
	for _, l := range mark {
		marked[l] = true
	}
	width := len(strconv.Itoa(len(m.orig)))
	for i, l := range m.orig {
		marker := "  "
		if marked[i] {
			marker = "> "
		}
		fmt.Fprintf(&sb, "%s%*d | %s\n", marker, width, i+1, strings.TrimSuffix(l, "\r"))
	}
	return errors.New(strings.TrimSuffix(sb.String(), "\n"))
}

// closest returns the line in [from, to) sharing the longest common substring
// with the pattern's literal text, if that is a substantial overlap.
func (m *matcher) closest(k int, from, to pos) (int, bool) {
	skel := strings.TrimSpace(m.pats[k].literalSkeleton(m.vars))
	if len(skel) < 3 || len(skel) > 500 {
		return 0, false
	}
	best, bestLine := 0, -1
	budget := 20_000_000 // DP cells; keeps hints cheap on huge outputs
	for l := from.line; l <= to.line && l < len(m.lines); l++ {
		line := m.lines[l]
		if budget -= len(skel) * len(line); budget < 0 {
			break
		}
		if n := commonSubsequence(skel, line); n > best {
			best, bestLine = n, l
		}
	}
	// Most of the literal text must appear, in order, on the line.
	if bestLine < 0 || 4*best < 3*len(skel) {
		return 0, false
	}
	return bestLine, true
}

// commonSubsequence returns the length of the longest common subsequence of
// a and b.
func commonSubsequence(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			switch {
			case a[i-1] == b[j-1]:
				cur[j] = prev[j-1] + 1
			case prev[j] >= cur[j-1]:
				cur[j] = prev[j]
			default:
				cur[j] = cur[j-1]
			}
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
