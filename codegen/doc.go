// Package codegen owns ppc's per-rank program format (programpb: a protobuf Program of
// buffers, kernels and an instruction stream of launches, inputs, send/recv, accumulations,
// copies and trace markers), plan.json, and the generation of both from a module split into
// per-stage functions, plus the disassembler behind `ppc dis`. plan.json records each
// program's SHA-256 and the schedule; readers check a program's bytes against the first
// before decoding them (Plan.CheckProgramBytes) and its action order against the second
// (Plan.CheckSchedule), so that what `ppc simulate` reads is what `ppc run` executes.
//
// Generation instantiates each per-stage function (F, I, W) once per micro-batch, in the order
// the schedule gives each rank, so a program is one whole training step, unrolled. That makes
// the runtime a plain loop and lets the memory plan see the real lifetimes: a stashed
// activation lives in the arena from its F to its I or W under exactly this schedule, and the
// arena size is the schedule's true peak. plan.json splits that arena into the most forward
// activations live at once (buffers created by F actions) and the workspace the backward and
// optimizer need beyond them, and counts a tied weight once per rank that holds it.
//
// Communication is derived from the data flow rather than written into the IR (DESIGN.md puts
// send/recv insertion among the passes): values that cross functions are IR ports, and when
// producer and consumer sit on different ranks the producer's rank sends right after the
// action that computes the value and the consumer's rank receives right before the first
// action that needs it. Sends never block, so a schedule whose compute order passes
// schedule.Validate cannot deadlock, and a new schedule needs no IR rewrite.
//
// Gradients accumulate over micro-batches in fp32 (fp64 for fp64 parameters). A tied weight's
// partial gradients (one per use, see passes.SplitStages) are exchanged between the ranks that
// hold it and summed in partial order on each of them — the same additions in the same order
// as on one device — so the weights stay bit-identical to single-device training (DESIGN.md
// §6's all-reduce would sum in a different order).
package codegen
