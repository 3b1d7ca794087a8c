package codegen

import (
	"fmt"
	"strings"

	pb "ppc.dev/ppc/codegen/programpb"
)

// Disassemble prints a program as text: header, buffers, kernels, then the instruction stream
// with each action's instructions indented under its BEGIN marker.
func Disassemble(p *pb.Program) string {
	var b strings.Builder
	var mesh []string
	replicas := int64(1)
	for _, c := range p.Mesh {
		mesh = append(mesh, fmt.Sprintf("%s=%d", c.Name, c.Value))
		if c.Name != "pp" {
			replicas *= c.Value
		}
	}
	fmt.Fprintf(&b, "program of pipeline rank %d, format %d, %d micro-batches, source %s\n", p.Pp, p.FormatVersion, p.Microbatches, p.SourceHash)
	fmt.Fprintf(&b, "mesh %s: run by %d rank(s)\narena %d bytes\n\nbuffers:\n", strings.Join(mesh, " "), replicas, p.ArenaBytes)
	for _, buf := range p.Buffers {
		t, err := TypeFromProto(buf.Dtype, buf.Shape)
		ts := t.String()
		if err != nil {
			ts = "<" + err.Error() + ">"
		}
		fmt.Fprintf(&b, "  b%-5d %-10s %-22s %s", buf.Id, strings.ToLower(buf.Role.String()), ts, buf.Name)
		switch buf.Role {
		case pb.Role_ACTIVATION, pb.Role_INPUT:
			fmt.Fprintf(&b, " @%d", buf.Offset)
		case pb.Role_PARAM, pb.Role_STATE:
			if buf.Data != nil {
				fmt.Fprintf(&b, " data[%d bytes]", len(buf.Data))
			} else {
				fmt.Fprintf(&b, " init=%s", buf.Init)
			}
			if len(buf.Shard) > 0 {
				b.WriteString(" shard=" + ShardText(buf.Shard))
			}
		case pb.Role_CONST:
			fmt.Fprintf(&b, " data[%d bytes]", len(buf.Data))
			if buf.Splat {
				b.WriteString(" splat")
			}
		case pb.Role_OUTPUT:
			fmt.Fprintf(&b, " mb=%d", buf.Microbatch)
		}
		b.WriteByte('\n')
	}
	b.WriteString("\nkernels:\n")
	for i, k := range p.Kernels {
		fmt.Fprintf(&b, "  k%-4d %s\n", i, kernelText(k))
	}
	b.WriteString("\ninstructions:\n")
	indent := "  "
	for i, in := range p.Instrs {
		if in.Kind == pb.Instr_END {
			indent = "  "
		}
		fmt.Fprintf(&b, "%5d %s%s\n", i, indent, instrText(p, in))
		if in.Kind == pb.Instr_BEGIN {
			indent = "    "
		}
	}
	return b.String()
}

func bufs(ids []int32) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = fmt.Sprintf("b%d", id)
	}
	return strings.Join(s, ", ")
}

func attrText(as []*pb.NamedAttr) string {
	a, err := AttrsFromProto(as)
	if err != nil {
		return "{<" + err.Error() + ">}"
	}
	if len(a) == 0 {
		return ""
	}
	s := ""
	for i, x := range a {
		if i > 0 {
			s += ", "
		}
		s += x.Name
		if v := attrValueText(x.Value); v != "" {
			s += " = " + v
		}
	}
	return " {" + s + "}"
}

func kernelText(k *pb.Kernel) string {
	if k.Pre != nil {
		// A prologue: its result is the op's operand 0, read from the launch's first
		// pre_inputs operands.
		return fmt.Sprintf("(%s on %d operands) > %s", kernelText(k.Pre), k.PreInputs, opText(k))
	}
	return opText(k)
}

// opText is kernelText without the prologue.
func opText(k *pb.Kernel) string {
	if k.Op != "fused" && len(k.Fused) == 0 {
		return k.Op + attrText(k.Attrs)
	}
	var steps []string
	for i, st := range k.Fused {
		args := make([]string, len(st.Args))
		for j, a := range st.Args {
			args[j] = fmt.Sprintf("$%d", a)
		}
		steps = append(steps, fmt.Sprintf("s%d = %s %s%s", i, st.Op, strings.Join(args, ", "), attrText(st.Attrs)))
	}
	if len(k.Outputs) > 0 {
		outs := make([]string, len(k.Outputs))
		for i, o := range k.Outputs {
			outs[i] = fmt.Sprintf("s%d", o)
		}
		steps = append(steps, "→ "+strings.Join(outs, ", "))
	}
	if k.Op != "fused" {
		// An epilogue: $0 is the op's result, $1 … the launch's operands after the op's.
		return fmt.Sprintf("%s%s, %d operands, then [%s]", k.Op, attrText(k.Attrs), k.OpInputs, strings.Join(steps, "; "))
	}
	return "fused [" + strings.Join(steps, "; ") + "]"
}

func instrText(p *pb.Program, in *pb.Instr) string {
	switch in.Kind {
	case pb.Instr_LAUNCH:
		name := "?"
		if in.Kernel >= 0 && int(in.Kernel) < len(p.Kernels) {
			k := p.Kernels[in.Kernel]
			name = k.Op
			if k.Pre != nil {
				name = k.Pre.Op + ">" + name
			}
		}
		return fmt.Sprintf("%s = launch k%d %s(%s)", bufs(in.Out), in.Kernel, name, bufs(in.In))
	case pb.Instr_INPUT:
		return fmt.Sprintf("%s = input %q mb %d", bufs(in.Out), in.Label, in.Microbatch)
	case pb.Instr_SEND:
		if in.Axis != "" { // a ring's step: the next rank on the axis
			return fmt.Sprintf("send %s to %s%+d (ring) tag %d", bufs(in.In), in.Axis, in.Peer, in.Tag)
		}
		return fmt.Sprintf("send %s to pp %d tag %d", bufs(in.In), in.Peer, in.Tag)
	case pb.Instr_RECV:
		if in.Axis != "" {
			return fmt.Sprintf("%s = recv from %s%+d (ring) tag %d", bufs(in.Out), in.Axis, in.Peer, in.Tag)
		}
		return fmt.Sprintf("%s = recv from pp %d tag %d", bufs(in.Out), in.Peer, in.Tag)
	case pb.Instr_ZERO:
		return fmt.Sprintf("zero %s", bufs(in.Out))
	case pb.Instr_ACCUM:
		return fmt.Sprintf("%s += %s", bufs(in.Out), bufs(in.In))
	case pb.Instr_COPY:
		return fmt.Sprintf("%s = copy %s", bufs(in.Out), bufs(in.In))
	case pb.Instr_ALL_REDUCE, pb.Instr_ALL_GATHER, pb.Instr_REDUCE_SCATTER, pb.Instr_BROADCAST, pb.Instr_ALL_TO_ALL:
		return collectiveText(in)
	case pb.Instr_PACK, pb.Instr_UNPACK:
		s := fmt.Sprintf("%s = %s %s", bufs(in.Out), strings.ToLower(in.Kind.String()), bufs(in.In))
		if in.Blocks > 1 {
			s += fmt.Sprintf(" in %d blocks", in.Blocks)
		}
		return s
	case pb.Instr_AXIS_INDEX:
		return fmt.Sprintf("%s = axis_index %s", bufs(in.Out), in.Axis)
	case pb.Instr_LOSS:
		return fmt.Sprintf("loss %s mb %d", bufs(in.In), in.Microbatch)
	case pb.Instr_METRIC:
		if in.Sum {
			return fmt.Sprintf("metric %q += %s mb %d", in.Label, bufs(in.In), in.Microbatch)
		}
		return fmt.Sprintf("metric %q %s", in.Label, bufs(in.In))
	case pb.Instr_BEGIN:
		if in.Label == "OPT" {
			return "begin OPT"
		}
		return fmt.Sprintf("begin %s stage %d mb %d", in.Label, in.Stage, in.Microbatch)
	case pb.Instr_END:
		return "end " + in.Label
	}
	return in.Kind.String()
}

// ShardText prints a sharding as the IR writes it: [_, tp], [[dp, tp], _].
func ShardText(dims []*pb.ShardDim) string {
	s := make([]string, len(dims))
	for i, d := range dims {
		switch axes := d.GetAxes(); len(axes) {
		case 0:
			s[i] = "_"
		case 1:
			s[i] = axes[0]
		default:
			s[i] = "[" + strings.Join(axes, ", ") + "]"
		}
	}
	return "[" + strings.Join(s, ", ") + "]"
}

// collectiveText prints a collective as "b4 = all_gather b3 dim 1 over tp" (or "over ranks
// [0 1]" for an explicit group); an in-place ALL_REDUCE or BROADCAST has no "b = " part, and
// a root is shown as its coordinate on the axis (its rank, for an explicit group).
func collectiveText(in *pb.Instr) string {
	var b strings.Builder
	if len(in.Out) > 0 {
		b.WriteString(bufs(in.Out) + " = ")
	}
	b.WriteString(strings.ToLower(in.Kind.String()))
	switch in.Kind {
	case pb.Instr_ALL_REDUCE, pb.Instr_REDUCE_SCATTER:
		b.WriteString(" " + strings.ToLower(in.ReduceOp.String()))
	}
	b.WriteString(" " + bufs(in.In))
	if in.Kind == pb.Instr_ALL_TO_ALL {
		fmt.Fprintf(&b, " split dim %d concat dim %d", in.Dim, in.ConcatDim)
	} else if in.Kind == pb.Instr_ALL_GATHER || in.Kind == pb.Instr_REDUCE_SCATTER || in.Dim != 0 {
		fmt.Fprintf(&b, " dim %d", in.Dim)
	}
	if in.Kind == pb.Instr_BROADCAST || in.Root != 0 {
		switch {
		case in.Axis != "":
			fmt.Fprintf(&b, " from %s %d", in.Axis, in.Root)
		case in.Root >= 0 && int(in.Root) < len(in.Group):
			fmt.Fprintf(&b, " from rank %d", in.Group[in.Root])
		default:
			fmt.Fprintf(&b, " from <root %d outside the group>", in.Root)
		}
	}
	if in.Axis != "" {
		fmt.Fprintf(&b, " over %s", in.Axis)
	}
	if len(in.Group) > 0 || in.Axis == "" {
		fmt.Fprintf(&b, " over ranks %v", in.Group)
	}
	if in.Tag != 0 {
		fmt.Fprintf(&b, " tag %d", in.Tag)
	}
	return b.String()
}
