// Package schedule owns ppc's pipeline schedules: per-rank action lists in
// PyTorch's torch.distributed.pipelining grammar, the generators of the
// published schedules, import and export of PyTorch's CSV files, the
// lowering that inserts SEND/RECV, a validator that dry-runs the lists, and
// an event-driven simulator with Chrome-trace and SVG output. It depends on
// nothing else in ppc; the passes (the cost model, token slicing), the
// compiler (rank-programs' order), the planner and `ppc simulate` call it.
// The runtime does not: it runs the programs that rank-programs ordered from
// a schedule and never sees the action lists.
//
// # Grammar
//
// A schedule has Ranks ranks, Stages stages (virtual stages included) and
// Microbatches micro-batches; Placement maps each stage to its rank, and
// each rank runs its Actions in order. One action (one CSV cell) is
//
//	{stage}F{mb}        forward
//	{stage}I{mb}        backward for the stage input ("B" pass of the Zero Bubble paper)
//	{stage}W{mb}        backward for the stage weights
//	{stage}B{mb}        full backward, I and W together (PyTorch 2.4's {stage}BW{mb} is read, B is written)
//	{stage}SEND_F{mb}   send the forward output; stage = the sending stage
//	{stage}RECV_F{mb}   receive the forward input; stage = the receiving stage
//	{stage}SEND_B{mb}   send the input gradient; stage = the sending stage
//	{stage}RECV_B{mb}   receive the output gradient; stage = the receiving stage
//	{stage}REDUCE_GRAD  reduce a stage's gradients over micro-batches (after all its W/B)
//	{stage}UNSHARD      FSDP all-gather of a stage's weights (accepted, zero cost)
//	{stage}RESHARD      FSDP release of a stage's weights (accepted, zero cost)
//	(0F7;7B3)OVERLAP_F_B  one F and one B (or I) run overlapped, as DualPipeV does
//	(empty)             idle step
//
// exactly as PyTorch's _Action/_ComputationType (schedules.py) writes them.
// Stage and micro-batch numbers count from 0. ParseAction is stricter than
// PyTorch's prefix regex: trailing text, a missing micro-batch on F/I/W/B or
// SEND/RECV, a micro-batch on REDUCE_GRAD/UNSHARD/RESHARD, and numbers above
// MaxIndex are errors.
//
// # Formats and CSV
//
// A schedule without SEND/RECV is in PyTorch's compute_only format: the
// data dependencies are implicit. With them it is compute_comms. The CSV file
// is one row per rank, no header, a cell per action, an empty cell for an
// idle step, rows of different lengths (ranks run different numbers of
// actions), lines ended with \r\n as Python's csv.writer writes them.
// ParseCSV detects the format and infers the placement from where each
// stage's actions appear; WriteCSV writes either format.
//
// The files also come in two dialects, PyTorch's spellings of the backward:
//
//	PyTorch 2.5 and later   I input backward, W weight backward, B full backward
//	PyTorch 2.4             B input backward, W weight backward, BW full backward
//
// ParseCSV detects the dialect of each file and records it in
// Schedule.Dialect: a file with W actions and no I (nor OVERLAP_F_B, which only
// later versions write) is 2.4's, since W needs an input backward before it and
// such a file can only spell it B; every other file is read in the current
// dialect (a file of F and B alone means the same in both: without W, 2.4's B
// was the full backward too). WriteCSV always writes the current dialect.
//
// # Dependencies and runtime semantics
//
// F of stage s needs the F output of stage s−1; I or B of stage s needs the
// input gradient of stage s+1 (from its I or B) and its own F; W needs its
// I. A dependency between stages on the same rank (the turn of a V, or
// consecutive stages of a loop placement with one rank) needs no
// communication but must be satisfied by an earlier action of that rank.
// Across ranks, the runtime's semantics are: a SEND is non-blocking (the
// message is buffered into the peer's mailbox), a RECV blocks until its
// message has arrived. LowerComm puts each SEND right after its producer and
// each RECV right before its consumer; under these semantics that blocks a
// rank exactly where the compute_only schedule would wait, so lowering never
// introduces a deadlock.
//
// # Placements and generators
//
// LoopPlacement puts stage s on rank s mod p (one stage per rank, or v
// interleaved stages per rank); VPlacement puts stages r and 2p−1−r on rank
// r. Generate builds, for p ranks and m micro-batches:
//
//	gpipe             all F, then all B                        m ≥ 1
//	1f1b              p−r−1 warm-up F, then F/B alternation     m ≥ p
//	interleaved-1f1b  Megatron's interleaved 1F1B, v ≥ 1        m a multiple of p
//	zb-h1             Zero Bubble ZB-H1 (I and W split)         m ≥ p
//	zb-h2             Zero Bubble ZB-H2 (I and W split)         m ≥ p
//	zbv               Zero Bubble ZB-V, V placement, v = 2      m ≥ 1
//	dualpipev         DeepSeek's DualPipeV, V placement, v = 2  m ≥ 2p
//	zb-auto           built for the costs (ZBAuto, GenerateFor)  m ≥ 1
//
// gpipe, 1f1b and interleaved-1f1b use the full backward B (as PyTorch and
// Megatron do); the simulator charges B = I+W unless told otherwise, so the
// classic formulas hold.
//
// CapHeld adapts a layout that defers W's to what its stages hold: where a W
// holds more after its I than its F stashed (a transformer layer's W reads the
// linears' inputs and output gradients), it runs deferred W's earlier on any
// rank that would otherwise pass the layout's busiest rank as the papers count
// memory. ppc compile and ppc plan apply it with measured bytes; Generate and
// ppc simulate give the layouts as the papers write them.
//
// # Simulator conventions and formulas
//
// Simulate runs each rank's list in order; an action starts when its rank is
// free and its inputs are ready (plus the transfer time across ranks) — an
// event-driven simulation with in-order ranks. All ranks start at 0.
//
//	step_time     when the last rank finishes
//	ideal_time    the busiest rank's compute time (sum of its action costs,
//	              without the collectives inside them)
//	bubble_time   the step time with free transfers and collectives −
//	              ideal_time: the idle time the schedule's dependencies cause;
//	              bubble_ratio = bubble_time / ideal_time (the papers' (p−1)/m)
//	collective_time  the step time with free transfers − the same with free
//	              collectives too: what collectives add (zero without them)
//	comm_time     step_time − the step time with free transfers: what the
//	              links add that compute does not hide, so that
//	              step_time = ideal_time + bubble_time + collective_time + comm_time
//	internal_bubble_time  the largest idle time of a rank between its own first
//	              start and last end, with free transfers (the papers'
//	              "parallelogram" view, in which the next step starts on each
//	              rank as soon as it is done)
//	span_time     the longest time a rank spends from its first computation's start to
//	              its last's end (transfers included): the Zero Bubble paper's cost;
//	              span_bubble_rate = (span_time − ideal_time) / span_time, the paper's
//	              (cost − m(F+B+W)) / cost, which counts no rank's wait for its first input
//	peak_activations  per rank, the most (stage, micro-batch) activations held at
//	              once; an activation is held from the start of its F to the end
//	              of its W, or of its B when the backward is not split
//
// An OVERLAP_F_B action costs Cost.FB (DualPipe's F&B) when given, else F+B:
// the two computations run back to back with no overlap gain. Its F's
// activation is stashed at its start and its B's freed at its end.
//
// With unit costs (F = I = W = 1, B = 2, comm = 0) the simulator reproduces:
//
//	gpipe, 1f1b        bubble_ratio = (p−1)/m; GPipe p = m = 4: bubble/step = 3/7
//	interleaved-1f1b   bubble_ratio = (p−1)/(v·m) for m a multiple of p
//	zb-h1              bubble_time = (p−1)(F+I−W) = (p−1), a third of 1F1B's
//	                   (p−1)(F+I+W); peak activations p on every rank
//	                   (1F1B: p on rank 0, p−r on rank r)
//	zb-h2              internal bubble (p−1)(F+I−2W) = 0; bubble_time (p−1)F,
//	                   the same as ZB-H1, because no schedule can start the last
//	                   stage before (p−1)F; with I > W it is strictly smaller
//	                   (F=1, I=2, W=1: (p−1)(F+I−2W) against (p−1)(F+I−W));
//	                   peak activations 2p−1 on every rank; this needs m ≥ 2p−1
//	                   (with fewer micro-batches the warm-up cannot be filled)
//	zbv                internal bubble 0; bubble_time (p−1)F (the fill of the V),
//	                   for m ≥ 2p−1; peak activations 2p per rank (two stages each)
//	dualpipev          bubble_time = (PP/2−1)(F&B+B−3W) with PP = 2p, the number
//	                   of stages (the DualPipe README counts PP stages; DualPipeV
//	                   folds them onto PP/2 = p ranks), F&B = F+B: 2(p−1). With a
//	                   real overlap (F&B < F+B) ranks do unequal work and the
//	                   formula gives the idle time of the most idle rank. Peak
//	                   activations PP+1 = 2p+1 per rank, parameters 2 stages per
//	                   rank (the README's "2×").
//
// # Collectives
//
// A compiled plan's per-stage costs (StageCost) also carry collectives. The
// tensor-parallel ones inside a stage's computations are part of F, I and W
// (the stage waits for them between its matmuls); FColl, IColl and WColl say
// how much, so reports can show it and the ideal time can leave it out. The
// data-parallel gradient all-reduce of a stage is issued when its last W (or
// B) ends and ZeRO-2's reduce-scatter when each W ends; like a transfer they
// run while the rank computes on, and a rank's reductions queue in issue
// order on its one collective stream. ZeRO's optimizer collectives
// (StepEnd) block the rank after its last action and reduction. The step
// ends when every rank's last action, reduction and step-end collective has.
//
// # Outputs
//
// Times carry their unit (Cost.Unit, Result.Unit): abstract units, as in the
// papers and --cost, or seconds, as a compiled plan's cost model gives them.
// Result.WriteTrace writes the Chrome Trace Event Format (one thread per
// rank, one "X" event per action) for Perfetto, in real microseconds for
// seconds and one millisecond per unit otherwise; Result.WriteSVG draws the
// timeline as the papers' figures do, its axis in µs, ms or s (or units), with
// a footer naming where the costs came from (Cost.Source). Both show the
// collectives: an action's collective time as a span nested at its end
// (trace) or a darker band at the end of its cell (SVG) — the end, because
// the simulator knows how long they take, not where among the action's ops
// they fall — and the reductions and step-end collectives on a thread of
// their own per rank (trace) or in a lane under the rank's row (SVG).
//
// # Token slices
//
// TeraPipe's token-level pipelining is a schedule transformation here, not another
// generator: SliceTokens expands any schedule over micro-batches into one over units (slice
// j of micro-batch mb is unit mb·M + j), forwards in slice order and backwards in reverse,
// and the engine adds the two same-stage dependencies slices have (a forward reads the
// earlier slices' K/V; a backward takes its K/V gradient from the later ones). Every
// generator, and every CSV, thereby takes slices, and the bubble structure the schedule was
// chosen for is kept; what the slices buy is that a stage starts a micro-batch's slice 0
// while its predecessor computes slice 1. Per-slice costs (StageCost.Slices) price later
// slices dearer. PlanTokenSlices is TeraPipe's dynamic program over the latency
// m·Σtᵢ + (K−1)·max tⱼ, with the micro-batch count chosen jointly when not fixed.
//
// # Errors
//
// Validation failures are *Error values carrying the rank, the 0-based
// action index, the action and what it waits on, e.g.
//
//	deadlock: rank 1 at action 0 (1RECV_F0) waits for 0SEND_F0, which rank 0
//	never reaches (blocked at action 0: 0RECV_B0 waits for 1SEND_B0); ...
//
// CSV syntax errors are *CSVError values with line, rank, column and cell.
// Nothing in the package panics on bad input.
package schedule
