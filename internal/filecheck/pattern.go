package filecheck

import (
	"errors"
	"fmt"
	"regexp"
	"regexp/syntax"
	"strings"
)

type pieceKind uint8

const (
	litPiece pieceKind = iota // literal text
	rePiece                   // {{regex}}
	defPiece                  // [[NAME:regex]]
	usePiece                  // [[NAME]]
)

type piece struct {
	kind  pieceKind
	text  string // literal text or regex source (canonicalised)
	name  string // defPiece, usePiece
	local bool   // usePiece: NAME is defined earlier in the same pattern
	ncap  int    // capture groups inside text (rePiece, defPiece)
}

// pattern is a compiled directive pattern. Variable uses are resolved at match
// time, when their values are known.
type pattern struct {
	pieces []piece
	defs   []string // names defined, in order
}

// canonWS replaces every run of spaces and tabs by a single space.
func canonWS(s string) string {
	if !strings.Contains(s, "\t") && !strings.Contains(s, "  ") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	inSpace := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == ' ' || c == '\t' {
			if !inSpace {
				b.WriteByte(' ')
			}
			inSpace = true
			continue
		}
		inSpace = false
		b.WriteByte(c)
	}
	return b.String()
}

// compileFragment validates a regexp fragment as it will be embedded and
// returns the number of capture groups it contains.
func compileFragment(re string) (int, error) {
	if _, err := regexp.Compile(re); err != nil {
		return 0, err
	}
	t, err := syntax.Parse("(?:"+re+")", syntax.Perl)
	if err != nil {
		return 0, fmt.Errorf("cannot be embedded in a larger pattern: %v", err)
	}
	return t.MaxCap(), nil
}

// openBraces returns the number of unescaped '{' in re not closed by a '}'.
func openBraces(re string) int {
	n := 0
	for i := 0; i < len(re); i++ {
		switch re[i] {
		case '\\':
			i++
		case '{':
			n++
		case '}':
			if n > 0 {
				n--
			}
		}
	}
	return n
}

func validVarName(name string) bool {
	name = strings.TrimPrefix(name, "$")
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c == '_', 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z':
		case '0' <= c && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// varEnd returns the index in s (the text after "[[") of the closing "]]",
// skipping square brackets and backslash escapes inside a regex, as LLVM's
// FindRegexVarEnd does.
func varEnd(s string) (int, error) {
	depth := 0
	for i := 0; i < len(s); {
		if depth == 0 && strings.HasPrefix(s[i:], "]]") {
			return i, nil
		}
		switch s[i] {
		case '\\':
			i += 2
			continue
		case '[':
			depth++
		case ']':
			if depth == 0 {
				return 0, errors.New(`unbalanced "]" inside "[[...]]" (to match a literal "[[" write {{\[\[}})`)
			}
			depth--
		}
		i++
	}
	return 0, errors.New(`unterminated "[[": missing closing "]]" (to match a literal "[[" write {{\[\[}})`)
}

// compilePattern parses a directive's pattern text.
func compilePattern(kind Kind, text string) (*pattern, error) {
	s := canonWS(strings.Trim(text, " \t"))
	if s == "" {
		return nil, fmt.Errorf("empty pattern: %s needs text to match", kind)
	}
	p := &pattern{}
	defined := map[string]bool{}
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			p.pieces = append(p.pieces, piece{kind: litPiece, text: lit.String()})
			lit.Reset()
		}
	}
	for s != "" {
		switch {
		case strings.HasPrefix(s, "{{"):
			end := strings.Index(s[2:], "}}")
			if end < 0 {
				return nil, fmt.Errorf(`unterminated "{{" in %q: missing closing "}}"`, s)
			}
			end += 2
			// The first "}}" ends the regex, as in LLVM, except that a regex
			// with an unclosed '{' (e.g. {{a{2}}}) takes the following '}'s.
			for open := openBraces(s[2:end]); open > 0 && end+2 < len(s) && s[end+2] == '}'; open-- {
				end++
			}
			re := s[2:end]
			if re == "" {
				return nil, errors.New(`empty regex "{{}}"`)
			}
			n, err := compileFragment(re)
			if err != nil {
				return nil, fmt.Errorf("bad regex {{%s}}: %v", re, err)
			}
			flush()
			p.pieces = append(p.pieces, piece{kind: rePiece, text: re, ncap: n})
			s = s[end+2:]
		case strings.HasPrefix(s, "[["):
			end, err := varEnd(s[2:])
			if err != nil {
				return nil, fmt.Errorf("in %q: %v", s, err)
			}
			body := s[2 : 2+end]
			s = s[2+end+2:]
			name, re, isDef := strings.Cut(body, ":")
			if strings.HasPrefix(name, "#") || strings.HasPrefix(name, "@") {
				return nil, fmt.Errorf("[[%s]]: numeric and pseudo variables (# and @) are not supported", body)
			}
			if !validVarName(name) {
				return nil, fmt.Errorf("[[%s]]: invalid variable name %q (want [A-Za-z_][A-Za-z0-9_]*; to match a literal \"[[\" write {{\\[\\[}})", body, name)
			}
			flush()
			if !isDef {
				p.pieces = append(p.pieces, piece{kind: usePiece, name: name, local: defined[name]})
				continue
			}
			if kind == Label {
				return nil, fmt.Errorf("[[%s]]: CHECK-LABEL patterns cannot define variables", body)
			}
			if defined[name] {
				return nil, fmt.Errorf("[[%s]]: variable %s is defined twice in one pattern", body, name)
			}
			n := 0
			if re != "" {
				if n, err = compileFragment(re); err != nil {
					return nil, fmt.Errorf("[[%s]]: bad regex %q: %v", body, re, err)
				}
			}
			defined[name] = true
			p.defs = append(p.defs, name)
			p.pieces = append(p.pieces, piece{kind: defPiece, name: name, text: re, ncap: n})
		default:
			i := strings.IndexAny(s[1:], "{[")
			if i < 0 {
				i = len(s)
			} else {
				i++
			}
			lit.WriteString(s[:i])
			s = s[i:]
		}
	}
	flush()
	return p, nil
}

// built is a pattern instantiated with the current variable values.
type built struct {
	src       string         // Go regexp; same-pattern uses are empty "()" placeholder groups
	prefilter string         // when backrefs != nil: a superset regexp without placeholders
	groups    map[string]int // defined name -> capture group index in src
	backrefs  map[int]int    // placeholder group -> group of the definition it repeats
	used      []string       // "NAME = value" for variables taken from earlier directives
}

// undefinedVarError reports a use of a variable nobody defined.
type undefinedVarError struct{ name string }

func (e *undefinedVarError) Error() string {
	return fmt.Sprintf("variable %s is undefined: no earlier directive captured [[%s:...]]", e.name, e.name)
}

// build instantiates p with vars.
func (p *pattern) build(vars map[string]string) (*built, error) {
	var src, pre strings.Builder
	b := &built{groups: map[string]int{}}
	seen := map[string]bool{}
	ncap := 0
	both := func(s string) {
		src.WriteString(s)
		pre.WriteString(s)
	}
	for _, pc := range p.pieces {
		switch pc.kind {
		case litPiece:
			both(regexp.QuoteMeta(pc.text))
		case rePiece:
			both("(?:" + pc.text + ")")
			ncap += pc.ncap
		case defPiece:
			ncap++
			b.groups[pc.name] = ncap
			both("(" + pc.text + ")")
			ncap += pc.ncap
		case usePiece:
			if pc.local {
				ncap++
				if b.backrefs == nil {
					b.backrefs = map[int]int{}
				}
				b.backrefs[ncap] = b.groups[pc.name]
				src.WriteString("()")
				pre.WriteString("(?s:.*)")
				continue
			}
			v, ok := vars[pc.name]
			if !ok {
				return nil, &undefinedVarError{pc.name}
			}
			if !seen[pc.name] {
				seen[pc.name] = true
				b.used = append(b.used, fmt.Sprintf("%s = %q", pc.name, v))
			}
			both(regexp.QuoteMeta(v))
		}
	}
	b.src = src.String()
	if b.backrefs != nil {
		b.prefilter = pre.String()
	}
	return b, nil
}

// literalSkeleton returns the pattern's literal text (with known variable
// values) for fuzzy "possible intended match" hints.
func (p *pattern) literalSkeleton(vars map[string]string) string {
	var b strings.Builder
	for _, pc := range p.pieces {
		switch pc.kind {
		case litPiece:
			b.WriteString(pc.text)
		case usePiece:
			b.WriteString(vars[pc.name])
		}
	}
	return b.String()
}
