// Package filecheck is ppc's LLVM-FileCheck-style matcher for golden tests of
// compiler passes.
//
// It owns two things: extracting check directives from the comments of a test
// file (Parse) and verifying a pass's textual output against them (Match). It
// does not run passes, locate test files or split files into cases; callers do
// that and hand this package the check text, the output, and (via lineOffset)
// where the check text sits in its file so that messages name the right line.
//
// # Directives
//
// A directive is a line whose first non-space text is a comment marker ("//"
// or "#"), optional spaces, then one of
//
//	CHECK:        the pattern must match at or after the current position
//	CHECK-NEXT:   the pattern must match on the line after the previous match
//	CHECK-SAME:   the pattern must match on the same line, after the previous match
//	CHECK-NOT:    the pattern must not occur between the previous match and the
//	              next positive match (or the end of the block/output)
//	CHECK-LABEL:  the pattern must match; labels partition the output into blocks
//
// Everything after the colon, with surrounding spaces trimmed, is the pattern.
// An unknown "CHECK-XXX:" suffix, the unsupported LLVM directives (CHECK-DAG,
// CHECK-EMPTY, CHECK-COUNT-n), a known directive missing its colon, an empty
// pattern, or a CHECK-NEXT/CHECK-SAME with no earlier positive directive is a
// parse error. Lines merely mentioning CHECK in prose ("// CHECK that ...",
// "// CHECKS:") are not directives.
//
// # Patterns
//
// A pattern matches a substring of a single output line; matches never span
// lines. Within a pattern:
//
//	text          matches literally
//	{{re}}        a Go regexp (package regexp syntax) fragment
//	[[NAME:re]]   matches re and captures the matched text as NAME
//	[[NAME]]      matches the text captured earlier as NAME, literally
//
// NAME is [A-Za-z_][A-Za-z0-9_]* (an optional leading '$' is accepted as part
// of the name, for LLVM compatibility). A variable may be used by any later
// directive, and later in the directive that defines it. Variables are never
// cleared (LLVM's default: there is no --enable-var-scope). CHECK-LABEL patterns
// may use variables but not define them; variables defined inside a CHECK-NOT
// are visible only within that CHECK-NOT. The "[[" of a variable ends at the
// first "]]" outside square brackets; to match a literal "[[" write
// {{\[\[}}. A regexp ends at the first "}}" (so "{stage = {{[0-9]+}}}" is
// a regexp followed by a literal '}'), except that a regexp with an unclosed
// '{' takes the '}'s that follow, so {{a{2}}} is the regexp a{2}.
//
// Whitespace is canonicalised as in FileCheck's default mode: in both the
// pattern and the output, every run of spaces and tabs becomes a single space,
// so "a b" in a pattern matches "a \t b" in the output but not "ab".
// Leading and trailing pattern spaces are ignored.
//
// When a search starts mid-line (after a previous match), the pattern sees only
// the rest of that line, as in LLVM: {{^}} then matches at the search start, so
// "CHECK-SAME: {{^}}x" means "x immediately after the previous match"; {{$}}
// matches at the end of the line.
//
// # Matching
//
// CHECK searches from the end of the previous match, which may be later on the
// same line. CHECK-NEXT looks only at the line after the previous match's line
// (LLVM instead takes the first match after the previous one and then insists
// it is on the next line, so it also rejects a match later on the previous
// line; here that match is simply not considered). CHECK-SAME looks only at the
// rest of the previous match's line.
//
// Labels partition the output into blocks. Before the directives of a block
// are checked, the CHECK-LABEL that closes it is matched, searching from the
// end of the previous label's match; the directives between two labels must
// then match between the end of the first label's match and the start of the
// second's. A CHECK whose only match lies in a later block therefore fails, and
// a label can use only variables defined before the previous label (as in
// LLVM). Match validates the directives as Parse does and fails if there are
// none.
//
// A failure names the directive (file:line and text), where matching stopped
// (output line and text, or end of output), the values of the variables the
// pattern used, hints such as a later or earlier match of the same pattern or
// a similar line, and ends with the whole output, line-numbered, with the
// relevant lines marked by '>'. Only the first failure is reported.
//
// Run combines Parse and Match for the common case of one check text and one
// output.
package filecheck
