package ir

import (
	"strconv"
	"unicode/utf8"
)

type tokKind uint8

const (
	tEOF    tokKind = iota
	tIdent          // layer_norm, f32, dense, true
	tInt            // 12, -3
	tFloat          // 1.5, -2e-3, inf, -inf, nan
	tHex            // 0x00ff
	tString         // "text"
	tValue          // %name or %"quoted"
	tSymbol         // @name or @"quoted"
	tPunct          // ( ) [ ] { } < > , : = ?
	tArrow          // ->
)

var tokNames = [...]string{tEOF: "end of input", tIdent: "identifier", tInt: "integer",
	tFloat: "float", tHex: "hex data", tString: "string", tValue: "value name",
	tSymbol: "symbol", tPunct: "punctuation", tArrow: "'->'"}

type token struct {
	kind      tokKind
	text      string // raw text (for tValue/tSymbol: the name, unquoted)
	line, col int
}

func (t token) describe() string {
	switch t.kind {
	case tEOF:
		return "end of input"
	case tValue:
		return "%" + t.text
	case tSymbol:
		return "@" + t.text
	case tString:
		return strconv.Quote(t.text)
	}
	return "'" + t.text + "'"
}

// lexer splits IR text into tokens. `//` starts a comment that runs to the end of the line
// (test files keep their CHECK lines there).
type lexer struct {
	src       string
	pos       int
	line, col int
	err       *lexError
}

type lexError struct {
	line, col int
	msg       string
}

func (lx *lexer) fail(line, col int, msg string) token {
	if lx.err == nil {
		lx.err = &lexError{line, col, msg}
	}
	lx.pos = len(lx.src)
	return token{kind: tEOF, line: line, col: col}
}

func (lx *lexer) advance(n int) {
	for i := 0; i < n; i++ {
		if lx.src[lx.pos] == '\n' {
			lx.line++
			lx.col = 1
		} else {
			lx.col++
		}
		lx.pos++
	}
}

func (lx *lexer) next() token {
	// Skip spaces and comments.
	for lx.pos < len(lx.src) {
		c := lx.src[lx.pos]
		if c == ' ' || c == '\t' || c == '\r' {
			lx.pos++
			lx.col++
			continue
		}
		if c == '\n' {
			lx.pos++
			lx.line++
			lx.col = 1
			continue
		}
		if c == '/' && lx.pos+1 < len(lx.src) && lx.src[lx.pos+1] == '/' {
			for lx.pos < len(lx.src) && lx.src[lx.pos] != '\n' {
				lx.pos++
			}
			continue
		}
		break
	}
	line, col := lx.line, lx.col
	if lx.pos >= len(lx.src) {
		return token{kind: tEOF, line: line, col: col}
	}
	start := lx.pos
	c := lx.src[lx.pos]
	switch {
	case c == '%' || c == '@':
		kind := tValue
		if c == '@' {
			kind = tSymbol
		}
		lx.advance(1)
		if lx.pos < len(lx.src) && lx.src[lx.pos] == '"' {
			s, ok := lx.quoted()
			if !ok {
				return lx.fail(line, col, "unterminated quoted name")
			}
			return token{kind: kind, text: s, line: line, col: col}
		}
		n := lx.pos
		for n < len(lx.src) && isNameByte(lx.src[n]) {
			n++
		}
		if n == lx.pos {
			return lx.fail(line, col, "expected a name after '"+string(c)+"'")
		}
		text := lx.src[lx.pos:n]
		lx.col += n - lx.pos
		lx.pos = n
		return token{kind: kind, text: text, line: line, col: col}
	case c == '"':
		s, ok := lx.quoted()
		if !ok {
			return lx.fail(line, col, "unterminated string")
		}
		return token{kind: tString, text: s, line: line, col: col}
	case c == '-' && lx.pos+1 < len(lx.src) && lx.src[lx.pos+1] == '>':
		lx.advance(2)
		return token{kind: tArrow, text: "->", line: line, col: col}
	case c == '-' && lx.hasPrefix("-inf") && !lx.nameByteAt(lx.pos+4):
		lx.advance(4)
		return token{kind: tFloat, text: "-inf", line: line, col: col}
	case c == '-' || c >= '0' && c <= '9':
		return lx.number(line, col)
	case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
		n := lx.pos
		for n < len(lx.src) && isNameByte(lx.src[n]) {
			n++
		}
		text := lx.src[start:n]
		lx.col += n - lx.pos
		lx.pos = n
		if text == "inf" || text == "nan" {
			return token{kind: tFloat, text: text, line: line, col: col}
		}
		return token{kind: tIdent, text: text, line: line, col: col}
	}
	switch c {
	case '(', ')', '[', ']', '{', '}', '<', '>', ',', ':', '=', '?':
		lx.advance(1)
		return token{kind: tPunct, text: lx.src[start : start+1], line: line, col: col}
	}
	// Name the whole character, not the first byte of its UTF-8 encoding.
	r, _ := utf8.DecodeRuneInString(lx.src[lx.pos:])
	return lx.fail(line, col, "unexpected character "+strconv.QuoteRune(r))
}

func (lx *lexer) hasPrefix(p string) bool {
	return len(lx.src)-lx.pos >= len(p) && lx.src[lx.pos:lx.pos+len(p)] == p
}

func (lx *lexer) nameByteAt(i int) bool { return i < len(lx.src) && isNameByte(lx.src[i]) }

func (lx *lexer) number(line, col int) token {
	start := lx.pos
	n := lx.pos
	if lx.src[n] == '-' {
		n++
	}
	if n+1 < len(lx.src) && lx.src[n] == '0' && (lx.src[n+1] == 'x' || lx.src[n+1] == 'X') && lx.src[start] != '-' {
		n += 2
		for n < len(lx.src) && isHexByte(lx.src[n]) {
			n++
		}
		lx.col += n - lx.pos
		lx.pos = n
		return token{kind: tHex, text: lx.src[start:n], line: line, col: col}
	}
	digits := n
	for n < len(lx.src) && lx.src[n] >= '0' && lx.src[n] <= '9' {
		n++
	}
	if n == digits {
		return lx.fail(line, col, "expected a number after '-'")
	}
	kind := tInt
	if n < len(lx.src) && lx.src[n] == '.' {
		kind = tFloat
		n++
		for n < len(lx.src) && lx.src[n] >= '0' && lx.src[n] <= '9' {
			n++
		}
	}
	if n < len(lx.src) && (lx.src[n] == 'e' || lx.src[n] == 'E') {
		m := n + 1
		if m < len(lx.src) && (lx.src[m] == '+' || lx.src[m] == '-') {
			m++
		}
		if m < len(lx.src) && lx.src[m] >= '0' && lx.src[m] <= '9' {
			kind = tFloat
			n = m
			for n < len(lx.src) && lx.src[n] >= '0' && lx.src[n] <= '9' {
				n++
			}
		}
	}
	if lx.nameByteAt(n) {
		return lx.fail(line, col, "malformed number "+strconv.Quote(lx.src[start:min(n+1, len(lx.src))]))
	}
	lx.col += n - lx.pos
	lx.pos = n
	return token{kind: kind, text: lx.src[start:n], line: line, col: col}
}

func isHexByte(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// quoted scans a Go-syntax double-quoted string at lx.pos.
func (lx *lexer) quoted() (string, bool) {
	n := lx.pos + 1
	esc := false
	for n < len(lx.src) {
		c := lx.src[n]
		if c == '\n' {
			return "", false
		}
		if c == '\\' {
			esc = true
			n += 2
			continue
		}
		if c == '"' {
			raw := lx.src[lx.pos : n+1]
			s := raw[1 : len(raw)-1]
			if esc {
				var err error
				s, err = strconv.Unquote(raw)
				if err != nil {
					return "", false
				}
			}
			lx.col += n + 1 - lx.pos
			lx.pos = n + 1
			return s, true
		}
		n++
	}
	return "", false
}
