package cuda

import (
	"path/filepath"
	"strings"
	"testing"

	"ppc.dev/ppc/ir"
)

// fakeNCCL records every call with its arguments; ncclCommInitRank logs the first and last
// bytes of the unique id it received by value.
const fakeNCCL = `
#include <stdio.h>
#include <string.h>
#include <stdint.h>
static char logbuf[1 << 16];
static int n;
#define LOG(...) (n += snprintf(logbuf + n, sizeof(logbuf) - n, __VA_ARGS__))
typedef struct { char internal[128]; } ncclUniqueId;
const char *fake_log(void) { return logbuf; }
int ncclGetUniqueId(ncclUniqueId *id) { for (int i = 0; i < 128; i++) id->internal[i] = (char)(i * 3 + 1); LOG("uniqueid\n"); return 0; }
int ncclCommInitRank(void **comm, int nranks, ncclUniqueId id, int rank) {
  if (rank >= nranks) return 4;
  *comm = (void *)0xc0; LOG("init nranks=%d rank=%d id=%d,%d,%d\n", nranks, rank, id.internal[0], id.internal[1], id.internal[127]); return 0;
}
int ncclCommDestroy(void *comm) { LOG("destroy %p\n", comm); return 0; }
int ncclCommAbort(void *comm) { LOG("abort %p\n", comm); return 0; }
int ncclAllReduce(const void *s, void *r, size_t count, int dt, int op, void *comm, void *stream) { LOG("allreduce %p %p %zu dt=%d op=%d comm=%p stream=%p\n", s, r, count, dt, op, comm, stream); return 0; }
int ncclAllGather(const void *s, void *r, size_t count, int dt, void *comm, void *stream) { LOG("allgather %p %p %zu dt=%d\n", s, r, count, dt); return 0; }
int ncclReduceScatter(const void *s, void *r, size_t count, int dt, int op, void *comm, void *stream) { LOG("reducescatter %p %p %zu dt=%d op=%d\n", s, r, count, dt, op); return 0; }
int ncclBroadcast(const void *s, void *r, size_t count, int dt, int root, void *comm, void *stream) { LOG("broadcast %zu dt=%d root=%d\n", count, dt, root); return 0; }
int ncclSend(const void *b, size_t count, int dt, int peer, void *comm, void *stream) { LOG("send %p %zu dt=%d peer=%d\n", b, count, dt, peer); return 0; }
int ncclRecv(void *b, size_t count, int dt, int peer, void *comm, void *stream) { LOG("recv %p %zu dt=%d peer=%d\n", b, count, dt, peer); return peer < 0 ? 4 : 0; }
int ncclGroupStart(void) { LOG("group start\n"); return 0; }
int ncclGroupEnd(void) { LOG("group end\n"); return 0; }
const char *ncclGetErrorString(int rc) { return rc == 4 ? "invalid argument" : "unknown"; }
`

// TestNCCLCalls: the NCCL binding through purego on a stand-in libnccl — the unique id
// arrives by value intact, every collective passes its buffers, count, ncclDataType_t and
// ncclRedOp_t (nccl.h's values), sends and receives pass bytes (ncclUint8), grouped ones run
// inside one group (ended even when a call fails), and errors carry NCCL's message.
func TestNCCLCalls(t *testing.T) {
	root := t.TempDir()
	fakeLib(t, filepath.Join(root, "libnccl.so.2"), fakeNCCL)
	lib := open(env(map[string]string{"LD_LIBRARY_PATH": root}), "NCCL", []string{"libnccl.so.2"}, "")
	n, err := OpenNCCL(&lib)
	if err != nil {
		t.Fatal(err)
	}
	id, err := n.UniqueID()
	if err != nil {
		t.Fatal(err)
	}
	c, err := n.Join(id, 4, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{
		c.AllReduce(0x1000, 0x1000, 96, ir.F32, "sum", 7),
		c.AllGather(0x2000, 0x3000, 10, ir.BF16, 7),
		c.ReduceScatter(0x3000, 0x2000, 10, ir.F64, "max", 7),
		c.Broadcast(0x4000, 0x4000, 5, ir.I64, 1, 7),
		c.Send(0x5000, 64, 3, 7),
		c.Recv(0x6000, 64, 1, 7),
		c.Exchange([]P2P{{Buf: 0x7000, Bytes: 16, Peer: 3}, {Recv: true, Buf: 0x8000, Bytes: 16, Peer: 1}}, 7),
		c.Abort(),
		c.Close(),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	var logOf func() string
	if err := lib.sym(&logOf, "fake_log"); err != nil {
		t.Fatal(err)
	}
	want := "uniqueid\ninit nranks=4 rank=2 id=1,4,126\nallreduce 0x1000 0x1000 96 dt=7 op=0 comm=0xc0 stream=0x7\nallgather 0x2000 0x3000 10 dt=9\n" +
		"reducescatter 0x3000 0x2000 10 dt=8 op=2\nbroadcast 5 dt=4 root=1\nsend 0x5000 64 dt=1 peer=3\nrecv 0x6000 64 dt=1 peer=1\ngroup start\nsend 0x7000 16 dt=1 peer=3\nrecv 0x8000 16 dt=1 peer=1\ngroup end\nabort 0xc0\ndestroy 0xc0\n"
	if got := logOf(); got != want {
		t.Errorf("calls:\n%s\nwant:\n%s", got, want)
	}
	if err := c.Recv(0x6000, 1, -1, 7); err == nil || err.Error() != "ncclRecv: invalid argument" {
		t.Errorf("a failing receive: %v", err)
	}
	if err := c.Exchange([]P2P{{Recv: true, Buf: 0x6000, Bytes: 1, Peer: -1}}, 7); err == nil || err.Error() != "ncclRecv: invalid argument" {
		t.Errorf("a failing receive in a group: %v", err)
	}
	if got := logOf(); !strings.HasSuffix(got, "group start\nrecv 0x6000 1 dt=1 peer=-1\ngroup end\n") {
		t.Errorf("the group was not ended after the failure:\n%s", got)
	}
	if _, err := n.Join(id, 2, 5); err == nil || !strings.Contains(err.Error(), "ncclCommInitRank: invalid argument") {
		t.Errorf("a rank outside the group: %v", err)
	}
	if err := c.AllReduce(0, 0, 1, ir.F32, "xor", 0); err == nil || !strings.Contains(err.Error(), `no reduction "xor"`) {
		t.Errorf("an unknown reduction: %v", err)
	}
}
