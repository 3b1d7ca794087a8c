package dsl

import (
	"errors"
	"fmt"
	"strings"

	"github.com/alecthomas/participle/v2"
	"github.com/alecthomas/participle/v2/lexer"

	"ppc.dev/ppc/ir"
)

// maxNesting bounds how deeply brackets, braces and unary operators may nest, so that the
// recursive-descent parser and the lowering never run out of stack on hostile input.
const maxNesting = 100

// sources maps file names to their text, so a diagnostic can quote its line whatever text it
// came from (the model file or a --set value).
type sources map[string]string

// errorAt builds a diagnostic at a parser position.
func (s sources) errorAt(p lexer.Position, format string, args ...any) *ir.Error {
	text := s[p.Filename]
	loc := s.loc(p)
	e := &ir.Error{Loc: loc, Msg: fmt.Sprintf(format, args...)}
	if loc.Line > 0 {
		e.Line = ir.SourceLine(text, loc.Line)
	}
	return e
}

// loc converts a parser position into an ir.Loc with a byte column (participle counts runes;
// the caret printer counts bytes).
func (s sources) loc(p lexer.Position) ir.Loc {
	text, ok := s[p.Filename]
	if !ok || p.Line == 0 || p.Offset < 0 || p.Offset > len(text) {
		return ir.Loc{File: p.Filename, Line: p.Line, Col: p.Column}
	}
	start := strings.LastIndexByte(text[:p.Offset], '\n') + 1
	return ir.Loc{File: p.Filename, Line: p.Line, Col: p.Offset - start + 1}
}

// parseFile parses a model file.
func parseFile(filename, src string, srcs sources) (*fileAST, error) {
	if err := checkNesting(filename, src, srcs); err != nil {
		return nil, err
	}
	p, err := parserOnce()
	if err != nil {
		return nil, fmt.Errorf("dsl: bad grammar: %v", err)
	}
	f, err := p.ParseString(filename, src)
	if err != nil {
		return nil, srcs.syntaxError(err)
	}
	return f, nil
}

// parseExpr parses one expression (a --set value); name is its pseudo file name.
func parseExpr(name, src string, srcs sources) (*exprAST, error) {
	if err := checkNesting(name, src, srcs); err != nil {
		return nil, err
	}
	p, err := exprParserOnce()
	if err != nil {
		return nil, fmt.Errorf("dsl: bad grammar: %v", err)
	}
	e, err := p.ParseString(name, src)
	if err != nil {
		return nil, srcs.syntaxError(err)
	}
	return e, nil
}

// syntaxError turns a participle or lexer error into a positioned diagnostic.
func (s sources) syntaxError(err error) error {
	var ut *participle.UnexpectedTokenError
	if errors.As(err, &ut) {
		tok := ut.Unexpected
		what := fmt.Sprintf("unexpected %q", tok.Value)
		if tok.EOF() {
			what = "unexpected end of input"
		}
		return s.errorAt(tok.Pos, "syntax error: %s%s", what, expecting(ut.Message()))
	}
	var pe participle.Error
	if errors.As(err, &pe) {
		msg := pe.Message()
		if strings.Contains(msg, "invalid input text") {
			msg = "unexpected character"
			p := pe.Position()
			if t := s[p.Filename]; p.Offset >= 0 && p.Offset < len(t) {
				msg = fmt.Sprintf("unexpected character %q", firstRune(t[p.Offset:]))
			}
		}
		return s.errorAt(pe.Position(), "syntax error: %s", msg)
	}
	return err
}

func firstRune(s string) string {
	for _, r := range s {
		return string(r)
	}
	return s
}

// expecting turns participle's "(expected …)" tail into a short hint: the first thing the
// grammar wanted there.
func expecting(msg string) string {
	i := strings.Index(msg, " (expected ")
	if i < 0 {
		return ""
	}
	want := strings.TrimSuffix(msg[i+len(" (expected "):], ")")
	if strings.HasPrefix(want, `"`) {
		if j := strings.Index(want[1:], `"`); j >= 0 {
			return " (expected " + want[:j+2] + ")"
		}
		return ""
	}
	first, _, _ := strings.Cut(want, " ")
	first = strings.TrimLeft(first, "(")
	if d, ok := grammarWords[strings.TrimRight(first, ")?*+")]; ok {
		return " (expected " + d + ")"
	}
	return ""
}

// grammarWords describes grammar types in messages.
var grammarWords = map[string]string{
	"ExprAST": "an expression", "AndAST": "an expression", "CmpAST": "an expression",
	"AddAST": "an expression", "MulAST": "an expression", "UnaryAST": "an expression",
	"PrimaryAST": "an expression", "TypeAST": "a type such as f32[4, 8]", "NameAST": "a name",
	"PathAST": "a name", "BodyAST": `"{"`, "NsAST": "a scope name", "EntryAST": "name = value",
	"StmtAST": "a statement", "DeclAST": "a declaration", "RangeAST": `"["`,
}

// checkNesting rejects input nested more deeply than maxNesting before the recursive parser
// sees it. It skips comments and strings and counts open brackets plus runs of unary
// operators.
func checkNesting(filename, src string, srcs sources) error {
	depth, run := 0, 0
	line, lineStart := 1, 0
	for i := 0; i < len(src); i++ {
		c := src[i]
		switch {
		case c == '\n':
			line++
			lineStart = i + 1
			continue
		case c == ' ' || c == '\t' || c == '\r':
			continue
		case c == '/' && i+1 < len(src) && src[i+1] == '/':
			for i < len(src) && src[i] != '\n' {
				i++
			}
			i--
			continue
		case c == '"':
			for i++; i < len(src) && src[i] != '"' && src[i] != '\n'; i++ {
				if src[i] == '\\' {
					i++
				}
			}
			run = 0
			continue
		case c == '(' || c == '[' || c == '{':
			depth++
		case c == ')' || c == ']' || c == '}':
			depth = max(depth-1, 0)
		}
		if c == '-' || c == '!' {
			run++
		} else {
			run = 0
		}
		if depth+run > maxNesting {
			p := lexer.Position{Filename: filename, Offset: i, Line: line, Column: i - lineStart + 1}
			return srcs.errorAt(p, "nesting too deep (more than %d levels of brackets or unary operators)", maxNesting)
		}
	}
	return nil
}
