// Package codegen owns ppc's per-rank program format (a protobuf Program defined by the
// project's own .proto: buffers, kernels, an instruction stream of launches, send/recv,
// collectives, frees and trace markers), plan.json (mesh, rank coordinates, stage→rank map,
// schedule, memory and bubble estimates) and the disassembler behind `ppc dis`.
package codegen
