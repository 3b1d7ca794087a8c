package ir

import (
	"fmt"
	"strings"
	"unicode/utf8"
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
		line, col, clipped := clipLine(e.Line, e.Loc.Col)
		b.WriteString("\n    ")
		if clipped[0] {
			b.WriteString("…")
		}
		b.WriteString(line)
		if clipped[1] {
			b.WriteString("…")
		}
		if col > 0 {
			b.WriteString("\n    ")
			if clipped[0] {
				b.WriteByte(' ') // under the "…"
			}
			// Keep tabs so the caret lines up under tab-indented text.
			for i := 0; i < col-1 && i < len(line); i++ {
				if line[i] == '\t' {
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

// A diagnostic prints a source line of up to maxShownLine bytes whole; a longer one (a
// generated model on one line, a hostile file) as a window of shownWindow bytes around the
// column, so an error does not flood the terminal with megabytes.
const (
	maxShownLine = 1000
	shownWindow  = 240
)

// clipLine returns the part of line to show for a caret at col (1-based, 0: none), the
// caret's column within it, and whether text was cut at the start and at the end.
func clipLine(line string, col int) (string, int, [2]bool) {
	if len(line) <= maxShownLine {
		return line, col, [2]bool{}
	}
	start := 0
	if col > shownWindow/2 {
		start = min(col-1-shownWindow/2, len(line)-shownWindow)
	}
	end := min(start+shownWindow, len(line))
	// Cut at character boundaries.
	for start > 0 && !utf8.RuneStart(line[start]) {
		start--
	}
	for end < len(line) && !utf8.RuneStart(line[end]) {
		end++
	}
	if col > 0 {
		col -= start
	}
	return line[start:end], col, [2]bool{start > 0, end < len(line)}
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
