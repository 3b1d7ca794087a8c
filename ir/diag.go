package ir

import (
	"fmt"
	"strings"
)

// Error is a diagnostic tied to a location. When the source text is known it prints the
// offending line and a caret under the column:
//
//	model.ir:3:12: undefined value %x
//	      %1 = add %x, %0 : f32[4]
//	               ^
type Error struct {
	Loc  Loc
	Msg  string
	Line string // the source line, when known
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.Loc.Known() {
		b.WriteString(e.Loc.String())
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	if e.Line != "" {
		b.WriteString("\n    ")
		b.WriteString(e.Line)
		if e.Loc.Col > 0 {
			b.WriteString("\n    ")
			// Keep tabs so the caret lines up under tab-indented text.
			for i := 0; i < e.Loc.Col-1 && i < len(e.Line); i++ {
				if e.Line[i] == '\t' {
					b.WriteByte('\t')
				} else {
					b.WriteByte(' ')
				}
			}
			b.WriteByte('^')
		}
	}
	return b.String()
}

// ErrorAt builds an Error, filling in the source line when src holds loc's file.
func ErrorAt(src *Source, loc Loc, format string, args ...any) *Error {
	e := &Error{Loc: loc, Msg: fmt.Sprintf(format, args...)}
	if src != nil && loc.File == src.Name && loc.Line > 0 {
		e.Line = SourceLine(src.Text, loc.Line)
	}
	return e
}

// SourceLine returns line n (1-based) of text without its newline.
func SourceLine(text string, n int) string {
	for i := 1; i < n; i++ {
		j := strings.IndexByte(text, '\n')
		if j < 0 {
			return ""
		}
		text = text[j+1:]
	}
	if j := strings.IndexByte(text, '\n'); j >= 0 {
		text = text[:j]
	}
	return strings.TrimRight(text, "\r")
}

// ErrorList is several diagnostics, reported together (the verifier collects up to a limit).
type ErrorList []*Error

func (l ErrorList) Error() string {
	var b strings.Builder
	for i, e := range l {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.Error())
	}
	return b.String()
}
