// Package programpb holds the generated Go for ppc's per-rank program format (program.proto).
package programpb

//go:generate protoc --go_out=. --go_opt=paths=source_relative program.proto
