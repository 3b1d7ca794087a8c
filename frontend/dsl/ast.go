package dsl

import (
	"sync"

	"github.com/alecthomas/participle/v2"
	"github.com/alecthomas/participle/v2/lexer"
)

// The grammar: participle structs, private to this package. lower.go turns them into IR.
// Newlines are plain whitespace: no statement can begin with a token that could continue an
// expression, so statements need no separator (a `parser:";"` is allowed and ignored).

var dslLexer = lexer.MustSimple([]lexer.SimpleRule{
	{Name: "Comment", Pattern: `//[^\n]*`},
	{Name: "Whitespace", Pattern: `[ \t\r\n]+`},
	{Name: "Float", Pattern: `(\d+\.\d*|\.\d+)([eE][-+]?\d+)?|\d+[eE][-+]?\d+`},
	{Name: "Int", Pattern: `\d+`},
	{Name: "String", Pattern: `"(\\.|[^"\\\n])*"`},
	{Name: "Ident", Pattern: `[A-Za-z_][A-Za-z0-9_]*`},
	{Name: "Punct", Pattern: `==|!=|<=|>=|&&|\|\||[-+*/@<>=!(){}\[\],;:.]`},
})

// pos is embedded in every node; participle fills it with the node's first token.
type pos = lexer.Position

type fileAST struct {
	Pos   pos
	Model *nameAST   `parser:"'model' @@"`
	Decls []*declAST `parser:"( @@ | ';' )*"`
}

type nameAST struct {
	Pos  pos
	Name string `parser:"@Ident"`
}

type declAST struct {
	Config  *configAST  `parser:"  @@"`
	Preset  *presetAST  `parser:"| @@"`
	Input   *inputAST   `parser:"| @@"`
	Block   *blockAST   `parser:"| @@"`
	Forward *forwardAST `parser:"| @@"`
}

type configAST struct {
	Pos     pos
	Entries []*entryAST `parser:"'config' '{' ( @@ | ';' )* '}'"`
}

type entryAST struct {
	Pos   pos
	Name  string   `parser:"@Ident '='"`
	Value *exprAST `parser:"@@"`
}

type presetAST struct {
	Pos     pos
	Name    string      `parser:"'preset' ( @Ident | @String )"`
	Entries []*entryAST `parser:"'{' ( @@ | ';' )* '}'"`
}

type inputAST struct {
	Pos    pos
	Kind   string    `parser:"@( 'input' | 'label' )"`
	Name   *nameAST  `parser:"@@ ':'"`
	Type   *typeAST  `parser:"@@"`
	Range  *rangeAST `parser:"( 'in' @@ )?"`
	NextOf *nameAST  `parser:"( 'next' 'of' @@ )?"`
}

type rangeAST struct {
	Pos pos
	Lo  *exprAST `parser:"'[' @@ ','"`
	Hi  *exprAST `parser:"@@ ')'"`
}

type typeAST struct {
	Pos   pos
	DType string     `parser:"@Ident"`
	Dims  []*exprAST `parser:"'[' ( @@ ( ',' @@ )* )? ']'"`
}

type blockAST struct {
	Pos    pos
	Name   *nameAST   `parser:"'block' @@"`
	Params []*nameAST `parser:"'(' ( @@ ( ',' @@ )* )? ')'"`
	Body   *bodyAST   `parser:"@@"`
}

type forwardAST struct {
	Pos  pos
	Body *bodyAST `parser:"'forward' @@"`
}

type bodyAST struct {
	Pos   pos
	Stmts []*stmtAST `parser:"'{' ( @@ | ';' )* '}'"`
}

type stmtAST struct {
	Param  *paramAST  `parser:"  @@"`
	Stage  *stageAST  `parser:"| @@"`
	Return *returnAST `parser:"| @@"`
	Repeat *repeatAST `parser:"| @@"`
	If     *ifAST     `parser:"| @@"`
	Loss   *lossAST   `parser:"| @@"`
	Output *outputAST `parser:"| @@"`
	Metric *metricAST `parser:"| @@"`
	Assign *assignAST `parser:"| @@"`
}

type paramAST struct {
	Pos   pos
	Name  *pathAST  `parser:"'param' @@ ':'"`
	Type  *typeAST  `parser:"@@ '='"`
	Init  *exprAST  `parser:"@@"`
	Shard *shardAST `parser:"( 'shard' @@ )?"`
}

// shardAST is a parameter's layout over the mesh: `shard [_, tp]`, one entry per dim, `_`
// for a replicated dim and `[dp, tp]` for a dim split over two axes.
type shardAST struct {
	Pos  pos
	Dims []*shardDimAST `parser:"'[' ( @@ ( ',' @@ )* )? ']'"`
}

type shardDimAST struct {
	Pos  pos
	Axes []string `parser:"( @Ident | '[' @Ident ( ',' @Ident )* ']' )"`
}

// pathAST is a dotted name: `parser:"ln1.g"`.
type pathAST struct {
	Pos   pos
	Parts []string `parser:"@Ident ( '.' @Ident )*"`
}

type stageAST struct {
	Pos pos
	Kw  bool `parser:"@'stage'"`
}

type returnAST struct {
	Pos    pos
	Values []*exprAST `parser:"'return' @@ ( ',' @@ )*"`
}

// repeatAST's count is a literal, a config name or a parenthesised expression, so that a
// call's `parser:"as"` can never swallow the loop's.
type repeatAST struct {
	Pos   pos
	Count *repeatCountAST `parser:"'repeat' @@"`
	Index *nameAST        `parser:"( 'as' @@ )?"`
	Body  *bodyAST        `parser:"@@"`
}

type repeatCountAST struct {
	Pos   pos
	Int   *string  `parser:"  @Int"`
	Name  *string  `parser:"| @Ident"`
	Paren *exprAST `parser:"| '(' @@ ')'"`
}

type ifAST struct {
	Pos    pos
	Cond   *exprAST `parser:"'if' @@"`
	Then   *bodyAST `parser:"@@"`
	ElseIf *ifAST   `parser:"( 'else' ( @@"`
	Else   *bodyAST `parser:"        | @@ ) )?"`
}

type lossAST struct {
	Pos   pos
	Value *exprAST `parser:"'loss' @@"`
}

// metricAST reports a scalar each step: `metric moe_dropped sum(…)`.
type metricAST struct {
	Pos   pos
	Name  *nameAST `parser:"'metric' @@"`
	Value *exprAST `parser:"@@"`
}

type outputAST struct {
	Pos   pos
	Name  *nameAST `parser:"'output' @@"`
	Value *exprAST `parser:"( '=' @@ )?"`
}

type assignAST struct {
	Pos     pos
	Targets []*nameAST `parser:"@@ ( ',' @@ )*"`
	Value   *exprAST   `parser:"'=' @@"`
}

// Expressions, loosest binding first: || then && then comparisons (non-associative) then
// + - then * / @ then unary - !.

type exprAST struct {
	Pos  pos
	Left *andAST   `parser:"@@"`
	Rest []*orTerm `parser:"@@*"`
}

type orTerm struct {
	Pos   pos
	Op    string  `parser:"@'||'"`
	Right *andAST `parser:"@@"`
}

type andAST struct {
	Pos  pos
	Left *cmpAST    `parser:"@@"`
	Rest []*andTerm `parser:"@@*"`
}

type andTerm struct {
	Pos   pos
	Op    string  `parser:"@'&&'"`
	Right *cmpAST `parser:"@@"`
}

type cmpAST struct {
	Pos  pos
	Left *addAST  `parser:"@@"`
	Rest *cmpTerm `parser:"@@?"`
}

type cmpTerm struct {
	Pos   pos
	Op    string  `parser:"@( '==' | '!=' | '<=' | '>=' | '<' | '>' )"`
	Right *addAST `parser:"@@"`
}

type addAST struct {
	Pos  pos
	Left *mulAST    `parser:"@@"`
	Rest []*addTerm `parser:"@@*"`
}

type addTerm struct {
	Pos   pos
	Op    string  `parser:"@( '+' | '-' )"`
	Right *mulAST `parser:"@@"`
}

type mulAST struct {
	Pos  pos
	Left *unaryAST  `parser:"@@"`
	Rest []*mulTerm `parser:"@@*"`
}

type mulTerm struct {
	Pos   pos
	Op    string    `parser:"@( '*' | '/' | '@' )"`
	Right *unaryAST `parser:"@@"`
}

type unaryAST struct {
	Pos     pos
	Op      string      `parser:"(   @( '-' | '!' )"`
	Operand *unaryAST   `parser:"    @@ )"`
	Primary *primaryAST `parser:"| @@"`
}

type primaryAST struct {
	Pos   pos
	Float *string   `parser:"  @Float"`
	Int   *string   `parser:"| @Int"`
	Str   *string   `parser:"| @String"`
	Paren *exprAST  `parser:"| '(' @@ ')'"`
	List  *listAST  `parser:"| @@"`
	Name  *nameExpr `parser:"| @@"`
}

type listAST struct {
	Pos   pos
	Elems []*exprAST `parser:"'[' ( @@ ( ',' @@ )* )? ']'"`
}

// nameExpr is a reference (`parser:"x"`, `parser:"ln1.g"`), a call (`parser:"softmax(x, axis = -1)"`, `attn(x) as
// layers[i]`parser:") or a tensor type ("`f32[seq, seq]`).
type nameExpr struct {
	Pos   pos
	Path  []string `parser:"@Ident ( '.' @Ident )*"`
	Call  *callAST `parser:"( @@"`
	Index *listAST `parser:"| @@ )?"`
}

type callAST struct {
	Pos  pos
	Args []*argAST `parser:"'(' ( @@ ( ',' @@ )* )? ')'"`
	As   *nsAST    `parser:"( 'as' @@ )?"`
}

// argAST is `expr` or `name = expr`; the grammar reads both as expressions so that it
// needs no lookahead, and argName checks that a named argument's name is an identifier.
type argAST struct {
	Pos pos
	Lhs *exprAST `parser:"@@"`
	Rhs *exprAST `parser:"( '=' @@ )?"`
}

// nsAST names the parameter scope of a block call: `parser:"layers[i]"`, `parser:"h.attn"`.
type nsAST struct {
	Pos   pos
	Parts []*nsPart `parser:"@@ ( '.' @@ )*"`
}

type nsPart struct {
	Pos   pos
	Name  string     `parser:"@Ident"`
	Index []*exprAST `parser:"( '[' @@ ']' )*"`
}

var (
	parserOnce = sync.OnceValues(func() (*participle.Parser[fileAST], error) {
		return participle.Build[fileAST](
			participle.Lexer(dslLexer),
			participle.Elide("Comment", "Whitespace"),
			participle.UseLookahead(0), // LL(1): errors point at the first token that does not fit
		)
	})
	exprParserOnce = sync.OnceValues(func() (*participle.Parser[exprAST], error) {
		p, err := parserOnce()
		if err != nil {
			return nil, err
		}
		return participle.ParserForProduction[exprAST](p)
	})
)
