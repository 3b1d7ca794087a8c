package passes

import (
	"fmt"

	"ppc.dev/ppc/ir"
)

// Partition assigns every op of @forward a pipeline stage.
var Partition = &Pass{
	Name: "partition",
	Doc: "Assign every op of @forward a pipeline stage in [0, pp). With pp=1 every op goes to stage 0. " +
		"With pp>1 the model's stage markers are used when their number equals pp.",
	Options: []Option{{Name: "pp", Default: "1", Doc: "number of pipeline stages"}},
	Run: func(m *ir.Module, opts Options) error {
		pp, err := opts.Int("pp")
		if err != nil {
			return err
		}
		if pp < 1 {
			return fmt.Errorf("pp must be at least 1, got %d", pp)
		}
		f := m.Func(ir.ForwardFunc)
		if f == nil {
			return fmt.Errorf("module has no @%s", ir.ForwardFunc)
		}
		if pp == 1 {
			for _, op := range f.Ops {
				op.Stage = 0
			}
			return nil
		}
		markers := 0
		for _, op := range f.Ops {
			markers = max(markers, op.Stage+1)
		}
		if markers != pp {
			return fmt.Errorf("the model has %d marked stages; pp=%d needs exactly that many", markers, pp)
		}
		for _, op := range f.Ops {
			if op.Stage == ir.NoStage {
				op.Stage = 0
			}
		}
		return nil
	},
}
