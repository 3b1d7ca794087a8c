// Package dsl owns ppc's model language (.ppm files): the participle grammar (ast.go, kept
// inside this package) and its lowering to an ir.Module in a separate step (lower.go,
// expr.go, builtins.go). Load parses, lowers and verifies; the result follows the model
// convention of ir/model.go. The shipped models are testdata/models/{mlp,gpt,llama}.ppm.
//
// # A model
//
//	model gpt
//
//	config {
//	  d_model = 64; n_heads = 4; n_layers = 8; seq = 32; batch = 16; vocab = 512
//	  head_dim = d_model / n_heads          // an error unless exact
//	}
//	preset small { d_model = 768; n_heads = 12; n_layers = 12 }
//	preset "gpt3-175b" { … }               // quote names that are not identifiers
//
//	input tokens: i64[batch, seq] in [0, vocab)
//	label labels: i64[batch, seq] in [0, vocab) next of tokens
//
//	block layer(x) {
//	  param ln.g: f32[d_model] = ones
//	  param ln.b: f32[d_model] = zeros
//	  return x + attn(layer_norm(x, ln.g, ln.b))   // attn's params: <scope>.attn.wq, …
//	}
//
//	forward {
//	  param wte: f32[vocab, d_model] = normal(0.02)
//	  x = gather(wte, tokens)
//	  repeat n_layers as i {
//	    if i > 0 { stage }
//	    x = layer(x) as layers[i]        // params layers.0.ln.g, layers.0.attn.wq, …
//	  }
//	  loss cross_entropy(x @ transpose(wte), labels)
//	}
//
// # Grammar
//
// Comments run from // to the end of the line. Newlines are whitespace; a `;` may separate
// statements but is never needed.
//
//	file      = "model" Ident { config | preset | input | block | forward }
//	config    = "config" "{" { Ident "=" expr } "}"
//	preset    = "preset" (Ident | String) "{" { Ident "=" expr } "}"
//	input     = ("input" | "label") Ident ":" type [ "in" "[" expr "," expr ")" ] [ "next" "of" Ident ]
//	type      = dtype "[" [ expr { "," expr } ] "]"          // f32[batch, d], f32[] is a scalar
//	block     = "block" Ident "(" [ Ident { "," Ident } ] ")" body
//	forward   = "forward" body
//	body      = "{" { stmt } "}"
//	stmt      = "param" path ":" type "=" init [ "shard" shard ]
//	          | "stage"
//	          | "repeat" (Int | Ident | "(" expr ")") [ "as" Ident ] body
//	          | "if" expr body [ "else" (if | body) ]
//	          | "return" expr { "," expr }                   // blocks only
//	          | "loss" expr                                  // forward only
//	          | "output" Ident [ "=" expr ]                  // forward only
//	          | Ident { "," Ident } "=" expr
//	init      = "normal" "(" std ")" | "uniform" "(" lo "," hi ")" | "zeros" | "ones"
//	shard     = "[" [ axes { "," axes } ] "]"                // one entry per dim: [_, tp]
//	axes      = "_" | Ident | "[" Ident { "," Ident } "]"    // _, tp, [dp, tp]
//	path      = Ident { "." Ident }
//	expr      = or;  or = and { "||" and };  and = cmp { "&&" cmp }
//	cmp       = add [ ("==" | "!=" | "<" | "<=" | ">" | ">=") add ]
//	add       = mul { ("+" | "-") mul };  mul = unary { ("*" | "/" | "@") unary }
//	unary     = ("-" | "!") unary | primary
//	primary   = Int | Float | String | "(" expr ")" | "[" [ expr { "," expr } ] "]"
//	          | path [ "(" [ arg { "," arg } ] ")" [ "as" scope ] | "[" exprs "]" ]
//	arg       = [ Ident "=" ] expr
//	scope     = Ident { "[" expr "]" } { "." Ident { "[" expr "]" } }   // layers[i] → layers.3
//
// # Semantics
//
// Values are compile-time numbers (integers and floats), bools, strings, lists, dtypes and
// types (`f32[seq, seq]`), which fold as the model is lowered, or tensors, which become IR
// values. Integer arithmetic is checked: overflow is an error and `/` of two integers must be
// exact (`64 / 5` is an error; write `64.0 / 5`). A number meeting a tensor becomes a rank-0
// constant of the tensor's dtype (a float does not convert to an integer tensor). Tensor
// operands must have equal dtypes and numpy-broadcastable shapes; `@` is matmul, and
// `a @ transpose(b)` is one matmul with transpose_b. Comparisons of tensors give bool tensors
// (`<=` is not(greater), …); comparisons of numbers give compile-time bools for `if`.
//
// Config constants are global. Each is evaluated once, lazily, so they may appear in any
// order; a cycle is an error. A preset replaces the expressions of the constants it names,
// then each --set value (a DSL expression) does; both must name declared constants. With
// Options.Microbatches = M > 1 the value of `batch` is divided by M before anything uses it.
// The module records the resolved values as the attribute `config`, the preset as `preset`
// and M as `microbatches`.
//
// Inputs become the first arguments of @forward, in declaration order, with {input}; a
// `label` adds {label}; an integer input must give its range `in [lo, hi)`, recorded as
// `range = [lo, hi]`; `next of tokens` records `shift_of = "tokens"` (labels are the token
// stream shifted by one). Their dims are config expressions.
//
// A `param` declares a trainable parameter: an argument of @forward with {param, init = "…"},
// named by the call's scope plus the local (possibly dotted) name. It is a declaration only;
// no data is allocated. Parameters follow the inputs in the order ops first use them; an
// unused or duplicate parameter is an error. Within its block a parameter is referred to by
// its local name (`ln.g`).
//
// A block is a function over values (tensors or compile-time values) whose body runs in a
// fresh scope: it sees its arguments, config constants and inputs, not its caller's
// variables. Each call gets a parameter scope: the caller's scope plus the block's name, or
// the path after `as` (`layer(x) as layers[i]`). `return` ends the block; it must be the
// last statement of its body, which may be an if's. A block returning several values is
// assigned with `a, b =`. A block may not call itself, directly or not. Arguments may be
// passed by parameter name. An unnamed result is named after the call's scope in the IR
// (%layers.3.attn) until an assignment names it.
//
// `repeat N as i { … }` runs its body N times (N a positive integer, at most 100,000) with i
// = 0 … N-1; the body shares the enclosing scope, so `x = layer(x) as layers[i]` threads x
// through N distinct layers.
//
// `stage` ends the current pipeline stage (JaxPP's mark_stage_end): ops built before the first
// marker get stage 0, the ops after the k-th marker stage k. A stage may not be empty. A
// model without markers leaves ops unannotated.
//
// An `if` may chain `else if`; its condition must fold to a bool (comparisons of numbers,
// bools or strings, && || !).
//
// `loss EXPR` returns a floating-point scalar with {loss}; a model without a loss returns its
// `output` values with {name = "…"}.
//
// # Builtins
//
// Arguments may be positional or named; `?` marks optional ones. Numbers fold where the
// function is elementwise math. Builtins() lists them with their docs.
//
// attention is the IR's fused attention op, written by the model rather than recognised in
// the decomposed chain by a pass: the model says what it means (causal, GQA without
// repeat_kv), and a chain written out by hand keeps its exact semantics (a −1e9 additive
// mask, a softmax the user may change) instead of being rewritten behind the user's back.
//
//	exp log sqrt rsqrt tanh sigmoid sin cos erf abs relu silu ceil floor (x)
//	gelu(x, approximate? = "none" | "tanh")
//	softmax(x, axis?)  log_softmax(x, axis?)              // default the last axis
//	layer_norm(x, scale?, bias?, axis?, eps?)  rms_norm(x, scale?, axis?, eps?)
//	matmul(a, b, bias?, transpose_a?, transpose_b?)
//	attention(q, k, v, mask?, causal?, scale?)           // fused: [..., heads, seq, dim]; fewer kv heads = GQA
//	top_k(x, k, axis?, largest?, groups?, topk_groups?)   // values, i64 indices; ties to the lower index;
//	                                                      // k of the topk_groups best of groups (DeepSeek-V3)
//	moe_slots(indices, experts, capacity)                 // slots (−1: dropped), load [experts]
//	moe_dispatch(x, slots, experts, capacity, weights?)   // tokens → [experts, capacity, d]
//	moe_combine(y, slots, weights?)                       // [experts, capacity, d] → tokens
//	reshape(x, shape)  transpose(x, perm?)  broadcast(x, shape)
//	gather(data, indices, axis?)  concat(xs…, axis?)  slice(x, starts, ends, axes?, steps?)
//	split(x, sizes, axis?)          // sizes: a list, or a count of equal pieces; axis default -1
//	where(cond, a, b)  cast(x, dtype)  iota(type, axis?)  arange(n, dtype?)
//	sum mean max (x, axes?, keepdims?)  maximum minimum pow (a, b)
//	cross_entropy(logits, labels, reduction?, ignore_index?)  mse(prediction, target, reduction?)
//	zeros(type)  ones(type)  full(type, value)             // splat constants
//	float(n)  int(n)  dim(x, axis)                          // compile-time numbers
//
// Constants: true, false, pi, inf; dtypes f64 f32 f16 bf16 i64 i32 i8 u8 bool.
//
// # Errors and limits
//
// Every error is an *ir.Error at file:line:col with the source line and a caret, e.g.
//
//	gpt.ppm:31:15: cannot matmul f32[16,32,64] @ f32[48,64]: contraction dims 64 and 48 differ
//
// Nothing panics or hangs on bad input (FuzzLoad checks): brackets and unary operators nest
// at most 100 deep, block calls 200 deep, a repeat runs at most 100,000 times, a split makes at
// most 4,096 pieces, a tensor has at most 2^50 elements, and a whole import takes at most
// 2,000,000 steps (statements plus ops; gpt3-175b needs about 10,000).
package dsl
