package cuda

import (
	"fmt"
	"strings"

	"ppc.dev/ppc/runtime/device"
)

// Tile kernels: a block of a fixed number of threads per tile of work (grid-stride over the
// tiles), whose threads stage operand tiles in shared memory and keep accumulators in
// registers across the phases of the tile — the shape of FlashAttention's kernels
// (kernels_attention.go).
//
// As a row kernel (rows.go), a tile kernel is phases separated by barriers; values that one
// thread writes and another reads cross a barrier in shared memory. Unlike a row kernel's,
// its threads also keep private state from one phase to the next (a query row's running
// maximum, sum and output accumulator), and phases sit in loops that every thread of the
// block runs alike (over key tiles). The host build has neither barriers nor concurrent
// threads: its launcher runs each phase for all the block's threads before the next, and
// keeps each private variable as an array with an element per thread, which the phase's
// text reaches through a reference of the same name. So the phases are the same text in both
// builds, and the host runs the device's schedule with each barrier a point where every
// thread has finished the phase before it.
//
// A phase is a do { … } while (0) body: `continue` ends the phase for its thread (a thread
// past the last row), never skipping a barrier on the device.

// tileKernel is a tile kernel's parts.
type tileKernel struct {
	tiles   int64
	block   int       // threads per block: the kernel is written for exactly this many
	shared  []tileVar // shared arrays
	private []tileVar
	setup   string // per tile, the same for every thread: coordinates from tile
	body    []tileItem
}

// tileVar is a shared array, or a thread's variable that lives across phases: a scalar (n 0)
// or an array.
type tileVar struct {
	ty, name string
	n        int
}

// tileItem is a phase (statements over tid) or a loop every thread runs alike (header, a
// C for(…) over the setup's values and outer loops' variables) around items.
type tileItem struct {
	phase string
	loop  string
	items []tileItem
}

func phase(s string) tileItem { return tileItem{phase: s} }

func loop(header string, items ...tileItem) tileItem { return tileItem{loop: header, items: items} }

// sharedBytes is the kernel's static shared memory (its arrays are float, double, or
// uint16_t: the bf16/f16 tiles of tensor-core products).
func (tk *tileKernel) sharedBytes() int64 {
	var n int64
	for _, v := range tk.shared {
		n += int64(v.n) * map[string]int64{"float": 4, "double": 8, "uint16_t": 2}[v.ty]
	}
	return n
}

// kernel writes the device function and the host launcher.
func (tk *tileKernel) kernel(s *device.Spec, name string) (Kernel, error) {
	params, hostArgs, ost, err := signature(s, true)
	if err != nil {
		return Kernel{}, fmt.Errorf("%s: %v", s.Op.Name, err)
	}
	var shared strings.Builder
	for _, v := range tk.shared {
		// 16-byte aligned: tensor-core fragments load 32-bit words of 16-bit tiles.
		fmt.Fprintf(&shared, "  PPC_SHARED %s %s[%d] PPC_ALIGN16;\n", v.ty, v.name, v.n)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "// %s: %s → %s, %d tiles of a block of %d threads, %d bytes of shared memory\n", name, s.Op.Name, s.Out[0], tk.tiles, tk.block, tk.sharedBytes())
	fmt.Fprintf(&b, "#ifndef PPC_HOST\nPPC_GLOBAL void %s(%s) {\n%s", name, strings.Join(params, ", "), shared.String())
	for _, v := range tk.private {
		if v.n > 0 {
			fmt.Fprintf(&b, "  %s %s[%d];\n", v.ty, v.name, v.n)
		} else {
			fmt.Fprintf(&b, "  %s %s;\n", v.ty, v.name)
		}
	}
	b.WriteString("  const long long tid = PPC_TID;\n")
	fmt.Fprintf(&b, "  for (long long tile = PPC_BID; tile < %dLL; tile += PPC_GDIM) {\n%s", tk.tiles, indent(tk.setup, "    "))
	var dev func(items []tileItem, in string)
	dev = func(items []tileItem, in string) {
		for _, it := range items {
			if it.loop != "" {
				fmt.Fprintf(&b, "%s%s {\n", in, it.loop)
				dev(it.items, in+"  ")
				fmt.Fprintf(&b, "%s}\n", in)
				continue
			}
			fmt.Fprintf(&b, "%sdo {\n%s%s} while (0);\n%sPPC_SYNC();\n", in, indent(it.phase, in+"  "), in, in)
		}
	}
	dev(tk.body, "    ")
	b.WriteString("  }\n}\n#else\n")
	// The host: each phase for every thread of the block before the next; a private
	// variable is an element per thread, bound by reference in each phase.
	fmt.Fprintf(&b, "PPC_GLOBAL void %s_host(void** in, void* out_, long long n, int grid, int block) {\n  (void)in; (void)n; (void)block;\n%s", name, shared.String())
	var bind strings.Builder
	for _, v := range tk.private {
		fmt.Fprintf(&b, "  static thread_local %s %s_t[%d]", v.ty, v.name, tk.block)
		if v.n > 0 {
			fmt.Fprintf(&b, "[%d];\n", v.n)
			fmt.Fprintf(&bind, "%s* %s = %s_t[tid]; (void)%s; ", v.ty, v.name, v.name, v.name)
		} else {
			b.WriteString(";\n")
			fmt.Fprintf(&bind, "%s& %s = %s_t[tid]; (void)%s; ", v.ty, v.name, v.name, v.name)
		}
	}
	np := len(params) - 2 - (len(s.Out) - 1)
	for i, p := range params[:len(params)-2] {
		if i < np {
			fmt.Fprintf(&b, "  %s = %s;\n", p, hostArgs[i])
		} else {
			// The kernel's other results come after its operands in the host's in[].
			os, _ := storage(s.Out[1+i-np].DType)
			fmt.Fprintf(&b, "  %s = (%s*)in[%d];\n", p, os, i)
		}
	}
	fmt.Fprintf(&b, "  %s = (%s*)out_;\n", params[len(params)-2], ost)
	fmt.Fprintf(&b, "  ppc_gdim = (unsigned)grid; ppc_bdim = %dU;\n", tk.block)
	fmt.Fprintf(&b, "  for (ppc_bid = 0; ppc_bid < ppc_gdim; ppc_bid++)\n    for (long long tile = ppc_bid; tile < %dLL; tile += grid) {\n%s", tk.tiles, indent(tk.setup, "      "))
	var host func(items []tileItem, in string)
	host = func(items []tileItem, in string) {
		for _, it := range items {
			if it.loop != "" {
				fmt.Fprintf(&b, "%s%s {\n", in, it.loop)
				host(it.items, in+"  ")
				fmt.Fprintf(&b, "%s}\n", in)
				continue
			}
			fmt.Fprintf(&b, "%sfor (ppc_tid = 0; ppc_tid < ppc_bdim; ppc_tid++) {\n%s  const long long tid = ppc_tid;\n%s  %s\n%s  do {\n%s%s  } while (0);\n%s}\n",
				in, in, in, bind.String(), in, indent(it.phase, in+"    "), in, in)
		}
	}
	host(tk.body, "      ")
	b.WriteString("    }\n}\n#endif\n")
	return Kernel{Name: name, Body: b.String(), N: tk.tiles, Block: int64(tk.block), Shared: tk.sharedBytes(), In: s.In, Out: s.Out[0]}, nil
}

// indent prefixes every line of s with in (s's lines end in newlines, or s is one line).
func indent(s, in string) string {
	if s == "" {
		return ""
	}
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimSuffix(s, "\n"), "\n") {
		b.WriteString(in + l + "\n")
	}
	return b.String()
}
