package filecheck

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Kind is the kind of a check directive.
type Kind int

// The directive kinds.
const (
	Check Kind = iota // CHECK:
	Next              // CHECK-NEXT:
	Not               // CHECK-NOT:
	Label             // CHECK-LABEL:
	Same              // CHECK-SAME:
)

var kindNames = [...]string{
	Check: "CHECK",
	Next:  "CHECK-NEXT",
	Not:   "CHECK-NOT",
	Label: "CHECK-LABEL",
	Same:  "CHECK-SAME",
}

// String returns the directive's spelling without the colon, e.g. "CHECK-NEXT".
func (k Kind) String() string {
	if k >= 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

func (k Kind) valid() bool { return k >= 0 && int(k) < len(kindNames) }

// Directive is one check line.
type Directive struct {
	Kind    Kind   // Check, Next, Not, Label, Same
	Pattern string // text after "CHECK...:" with surrounding spaces trimmed
	File    string // file name for messages
	Line    int    // 1-based line in File
}

// String returns the directive as written, e.g. "CHECK-NEXT: mul [[X]]".
func (d Directive) String() string {
	if d.Pattern == "" {
		return d.Kind.String() + ":"
	}
	return d.Kind.String() + ": " + d.Pattern
}

// loc returns "file:line" for messages.
func (d Directive) loc() string {
	f := d.File
	if f == "" {
		f = "<checks>"
	}
	return f + ":" + strconv.Itoa(d.Line)
}

// errorf formats an error about d: "file:line: KIND: pattern: message".
func (d Directive) errorf(format string, args ...any) error {
	return fmt.Errorf("%s: %s: %s", d.loc(), d.String(), fmt.Sprintf(format, args...))
}

// suffixKinds maps the text after "CHECK-" to its kind.
var suffixKinds = map[string]Kind{
	"NEXT":  Next,
	"NOT":   Not,
	"LABEL": Label,
	"SAME":  Same,
}

// unsupportedSuffix reports whether s names an LLVM directive this package
// deliberately does not implement.
func unsupportedSuffix(s string) bool {
	switch s {
	case "DAG", "EMPTY":
		return true
	}
	return strings.HasPrefix(s, "COUNT-")
}

const supportedList = "CHECK:, CHECK-NEXT:, CHECK-SAME:, CHECK-NOT:, CHECK-LABEL:"

// Parse extracts directives from src. A directive is a line whose first
// non-space text is a comment marker `//` (also accepted: `#`) followed by
// optional spaces then CHECK:, CHECK-NEXT:, CHECK-NOT:, CHECK-LABEL: or
// CHECK-SAME:. lineOffset is added to line numbers (src may be one case cut out
// of a larger file). Malformed directives are reported together, one
// "file:line: ..." message per line, joined with errors.Join.
func Parse(file string, src string, lineOffset int) ([]Directive, error) {
	var (
		dirs        []Directive
		errs        []error
		sawPositive bool
	)
	for i, raw := range strings.Split(src, "\n") {
		line := i + 1 + lineOffset
		kind, pat, ok, err := lexLine(strings.TrimSuffix(raw, "\r"))
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %v", Directive{File: file, Line: line}.loc(), err))
			continue
		}
		if !ok {
			continue
		}
		d := Directive{Kind: kind, Pattern: pat, File: file, Line: line}
		if _, err := checkDirective(d, sawPositive); err != nil {
			errs = append(errs, err)
		}
		if kind != Not {
			sawPositive = true
		}
		dirs = append(dirs, d)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return dirs, nil
}

// lexLine recognises a directive line. ok is false for lines that are not
// directives; err is set for lines that look like a directive but are malformed.
func lexLine(line string) (kind Kind, pattern string, ok bool, err error) {
	s := strings.TrimLeft(line, " \t")
	switch {
	case strings.HasPrefix(s, "//"):
		s = s[2:]
	case strings.HasPrefix(s, "#"):
		s = s[1:]
	default:
		return 0, "", false, nil
	}
	s = strings.TrimLeft(s, " \t")
	rest, found := strings.CutPrefix(s, "CHECK")
	if !found {
		return 0, "", false, nil
	}
	switch {
	case rest == "" || strings.TrimRight(rest, " \t") == "":
		return 0, "", false, errors.New(`"CHECK" directive is missing its ':'`)
	case rest[0] == ':':
		return Check, strings.Trim(rest[1:], " \t"), true, nil
	case rest[0] == '{':
		return 0, "", false, fmt.Errorf("directive modifiers such as %q are not supported (supported directives: %s)", "CHECK"+rest[:strings.IndexByte(rest, '}')+1], supportedList)
	case rest[0] == '-':
		n := 1
		for n < len(rest) && isSuffixByte(rest[n]) {
			n++
		}
		suffix := rest[1:n]
		name := "CHECK-" + suffix
		k, known := suffixKinds[suffix]
		if n < len(rest) && rest[n] == ':' {
			switch {
			case known:
				return k, strings.Trim(rest[n+1:], " \t"), true, nil
			case unsupportedSuffix(suffix):
				return 0, "", false, fmt.Errorf("%s: is not supported (supported directives: %s)", name, supportedList)
			default:
				return 0, "", false, fmt.Errorf("unknown directive %s: (supported directives: %s)", name, supportedList)
			}
		}
		if known || unsupportedSuffix(suffix) {
			return 0, "", false, fmt.Errorf("%q directive is missing its ':'", name)
		}
		return 0, "", false, nil
	default:
		// "CHECKS:", "CHECKED", "CHECK that ..." and the like are prose.
		return 0, "", false, nil
	}
}

func isSuffixByte(c byte) bool {
	return c == '-' || c == '_' || ('A' <= c && c <= 'Z') || ('a' <= c && c <= 'z') || ('0' <= c && c <= '9')
}

// checkDirective validates d on its own and in sequence: sawPositive says
// whether a positive (non-NOT) directive precedes it. It returns d's compiled
// pattern.
func checkDirective(d Directive, sawPositive bool) (*pattern, error) {
	if !d.Kind.valid() {
		return nil, d.errorf("invalid directive kind %d", int(d.Kind))
	}
	if (d.Kind == Next || d.Kind == Same) && !sawPositive {
		return nil, d.errorf("%s has no previous CHECK or CHECK-LABEL to be relative to; it cannot be the first positive directive", d.Kind)
	}
	p, err := compilePattern(d.Kind, d.Pattern)
	if err != nil {
		return nil, d.errorf("%v", err)
	}
	return p, nil
}
