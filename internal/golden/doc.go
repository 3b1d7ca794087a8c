// Package golden owns the mechanics shared by ppc's golden-file tests (passes' testdata/passes
// and the DSL's testdata/dsl): cutting a file into `// -----` cases that keep their line
// numbers, reading `// ERROR "regex"` expectations, and matching a run's diagnostics against
// them (Go's test/ harness convention). What to run on each case, and the FileCheck of its
// output (internal/filecheck), stay with each package's test. Files snapshots a directory,
// for tests that compare whole outputs (checkpoints) byte for byte.
package golden
