// Package passes owns ppc's IR transformations and the pass manager.
//
// A pass is a value {Name, Doc, Options, Run}; table.go lists every pass once, in the order a
// full compile runs them, and init validates the table (unique names, docs, options). A
// pipeline is a string — `canonicalize,cse,dce`, or with options `name{key=value}` — parsed
// against that table. The manager (Run) verifies the input and, with VerifyEach, the IR after
// every pass; it prints IR before/after passes or after changes, writes one numbered file per
// pass to a dump directory. A pass's own error is about its input (a bad option, IR it cannot
// handle) and is reported as it is; an internal failure (a verifier error after the pass, or a
// panic) also writes a reproducer .ir holding the remaining pipeline as a `// RUN:` line and
// the pass's exact input, which runs as a golden test under testdata/passes.
//
// Golden tests: every testdata/passes/*.ir file starts with `// RUN: passes=PIPELINE`, holds
// cases split by `// -----`, and checks the printed result with FileCheck directives
// (internal/filecheck) and expected diagnostics with `// ERROR "regex"` on the offending line.
package passes
