package cpu

import (
	"fmt"
	"sort"
	"sync/atomic"

	"ppc.dev/ppc/ir"
	k "ppc.dev/ppc/kernels/cpu"
	"ppc.dev/ppc/runtime/device"
)

// Device is the CPU device.
type Device struct {
	// scratch holds the widened copies of bf16 and f16 tensors (lowprec.go).
	scratch scratchList
	// constGen counts ForgetConstants calls: a kernel's prepared form of a constant operand
	// (constant.go) is used only while the count is the one it was made under.
	constGen atomic.Uint64
}

// ForgetConstants implements device.Constants.
func (d *Device) ForgetConstants() { d.constGen.Add(1) }

// New returns the CPU device.
func New() *Device { return &Device{} }

// Name is "cpu".
func (*Device) Name() string { return "cpu" }

// SetSharedCores implements device.SharedCores: the kernels' helper goroutines stop spinning
// between parallel regions while several ranks share the process's cores. With one rank, it
// wakes them for the step about to start (kernels/cpu.WakeHelpers).
func (*Device) SetSharedCores(shared bool) {
	k.SetSharedCores(shared)
	k.WakeHelpers()
}

// builder prepares the kernel of one op for a launch site.
type builder func(s *device.Spec) (device.Impl, error)

// builders maps op names to their preparation, for every non-elementwise op.
var builders = map[string]builder{}

func register(name string, b builder) {
	if builders[name] != nil {
		panic("runtime/cpu: kernel " + name + " registered twice")
	}
	builders[name] = b
}

// Prepare implements device.Device.
func (d *Device) Prepare(s *device.Spec) (impl device.Impl, err error) {
	defer func() {
		// A preparation bug must surface as an error naming the op, never crash the loader.
		if r := recover(); r != nil {
			impl, err = nil, fmt.Errorf("cannot prepare %s: %v", s.Name(), r)
		}
	}()
	if s.Pre != nil {
		return d.preparePrologue(s)
	}
	if s.Epilogue() {
		return d.prepareEpilogue(s)
	}
	if s.Op == nil || s.Op.Has(ir.Elementwise) {
		return prepareElementwise(s)
	}
	if cb := constBuilders[s.Op.Name]; cb != nil && s.Const != nil {
		if impl, ok := cb(d, s); ok {
			return impl, nil
		}
	}
	b := builders[s.Op.Name]
	if b == nil {
		return nil, fmt.Errorf("no CPU kernel for op %s", s.Op.Name)
	}
	impl, err = b(s)
	if err != nil && hasLow(s.In, s.Out) {
		// bf16/f16 through the f32 kernel, rounded (lowprec.go).
		return d.prepareWidened(s, b, err)
	}
	return impl, err
}

// Supports reports whether the CPU device has a kernel for the op.
func Supports(op *ir.OpDef) bool {
	if op.Has(ir.Elementwise) {
		_, ok := elementwiseOps[op.Name]
		return ok
	}
	return builders[op.Name] != nil
}

// Ops lists the ops the CPU device has a kernel for besides the elementwise ones, sorted:
// other devices check their coverage against it.
func Ops() []string {
	names := make([]string, 0, len(builders))
	for n := range builders {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
