package passes

// table is every pass in the order a full compile runs them (`ppc passes` lists it so).
// Adding a pass means adding a row here; nothing registers itself.
var table = []*Pass{
	ShapeInfer,
	Canonicalize,
	CSE,
	DCE,
	MarkExperts,
	AddLoss,
	Precision,
	CPPartition,
	PadVocab,
	ShardAnnotate,
	ShardPropagate,
	SpmdPartition,
	Partition,
	TokenSlice,
	Autodiff,
	Optimizer,
	LossScale,
	SplitStages,
	ParamGather,
	RingAttention,
	RankPrograms,
	GradReduce,
	TiedGrads,
	RankOptimizer,
}
