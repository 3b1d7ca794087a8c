package dist

import (
	"bytes"
	"encoding/json"
	"math"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// FuzzWire feeds arbitrary bytes to every decoder a connection reaches: the handshake's
// hello, a frame header and its payload, a control message. None may panic, and the
// handshake must never accept a hello that was not made with the token.
func FuzzWire(f *testing.F) {
	token := []byte("tok")
	nonce := bytes.Repeat([]byte{7}, nonceSize)
	// A valid hello, a valid frame, a valid control message, and garbage.
	c1, c2 := net.Pipe()
	go func() {
		var greet [greetingSize]byte
		copy(greet[:], handshakeMagic[:])
		copy(greet[len(handshakeMagic):], nonce)
		c2.Write(greet[:])
		hello := make([]byte, helloSize)
		c2.Read(hello)
		f.Add(hello, []byte{})
		c2.Close()
	}()
	dialHandshake(c1, token, purposePeer, 3)
	c1.Close()
	h := frameHeader{kind: frameCtrl}.encode()
	f.Add(append(h[:], []byte(`{"type":"gather","key":"step#0","data":{"loss_sum":1}}`)...), []byte("x"))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"), []byte{0xff})
	f.Fuzz(func(t *testing.T, data, extra []byte) {
		if _, _, err := checkHello(append(data, extra...), nonce, token, nil); err == nil {
			// Only a hello computed with the token verifies; the seed above is one.
			if len(data)+len(extra) != helloSize {
				t.Fatal("accepted a hello of the wrong size")
			}
		}
		if len(data) >= frameHeaderSize {
			if hd, err := decodeFrameHeader(data[:frameHeaderSize], 1<<20); err == nil {
				if hd.n > 1<<20 {
					t.Fatalf("accepted a %d-byte payload over the 1 MiB bound", hd.n)
				}
			}
		}
		readFrame(bytes.NewReader(data), 1<<16, func(n int) []byte {
			if n > 1<<16 {
				t.Fatalf("asked to allocate %d bytes over the bound", n)
			}
			return make([]byte, n)
		})
		if m, err := decodeCtrl(data); err == nil && m.Type == "" {
			t.Fatal("a control message without a type")
		}
	})
}

// TestHandshakeRefusesWrongToken: a dialer with another token is refused on both sides.
func TestHandshakeRefusesWrongToken(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	done := make(chan error, 1)
	go func() {
		_, _, err := acceptHandshake(a, []byte("right"))
		a.Close()
		done <- err
	}()
	if err := dialHandshake(b, []byte("wrong"), purposeStore, 0); err == nil {
		t.Fatal("the dialer accepted an acceptor that did not answer")
	}
	if err := <-done; err != errBadToken {
		t.Fatalf("acceptor: %v, want %v", err, errBadToken)
	}
}

// TestHandshakeGarbageTimesOut: an acceptor that gets too few bytes gives up at its deadline
// instead of waiting forever (a port scanner opens and idles).
func TestHandshakeGarbageTimesOut(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer func(d time.Duration) { handshakeWait = d }(handshakeWait)
	handshakeWait = 300 * time.Millisecond
	c.Write([]byte("SSH-2.0-OpenSSH\r\n"))
	start := time.Now()
	_, _, err = acceptHandshake(s, []byte("tok"))
	if err == nil || !strings.Contains(err.Error(), "handshake") {
		t.Fatalf("got %v", err)
	}
	if d := time.Since(start); d > handshakeWait+2*time.Second {
		t.Fatalf("took %s", d)
	}
}

// TestStepEndCarriesNaN: a diverged step's loss (NaN, ±Inf) and metrics cross the control
// connection as they are, so every process reports the divergence instead of failing to
// encode it.
func TestStepEndCarriesNaN(t *testing.T) {
	for _, v := range []float64{math.NaN(), math.Inf(1), math.Inf(-1), 2.5, 0} {
		b, err := json.Marshal(stepEnd{LossSum: wireFloat(v), Metrics: map[string]wireFloat{"grad_norm": wireFloat(v)}})
		if err != nil {
			t.Fatalf("%v: %v", v, err)
		}
		var e stepEnd
		if err := json.Unmarshal(b, &e); err != nil {
			t.Fatalf("%v: %s: %v", v, b, err)
		}
		got, m := float64(e.LossSum), float64(e.Metrics["grad_norm"])
		if !(got == v || math.IsNaN(v) && math.IsNaN(got)) || !(m == v || math.IsNaN(v) && math.IsNaN(m)) {
			t.Fatalf("%v came back as %v, %v", v, got, m)
		}
	}
	var e stepEnd
	if err := json.Unmarshal([]byte(`{"loss_sum":"hello"}`), &e); err == nil {
		t.Fatal("a string that is not NaN or infinity was read as a loss")
	}
}

// TestStoreAbortReachesLateJoiner: a process refused for running another plan stops the run
// even when it reaches the rendezvous before rank 0's own worker has joined: the worker that
// joins afterwards gets the abort at once instead of waiting out the join timeout (the race
// CI once hit: rank 0 waited 5 minutes).
func TestStoreAbortReachesLateJoiner(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	token := []byte("tok")
	s := newStore(ln, storeRun{world: 2, token: token, planHash: "planA", heartbeat: time.Minute, join: time.Minute, log: func(string) {}})
	defer s.close()
	join := func(rank int, plan string) *ctrlMsg {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := dialHandshake(c, token, purposeStore, rank); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		if err := writeCtrl(c, &mu, &ctrlMsg{Type: "hello", Rank: rank, World: 2, PlanHash: plan}); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		m, err := readCtrl(c)
		if err != nil {
			t.Fatalf("rank %d: %v", rank, err)
		}
		return m
	}
	if m := join(1, "planB"); m.Type != "refused" || !strings.Contains(m.Error, "runs plan planB") {
		t.Fatalf("the process on another plan got %+v", m)
	}
	if m := join(0, "planA"); m.Type != "abort" || !m.Input || !strings.Contains(m.Error, "runs plan planB") {
		t.Fatalf("rank 0, joining after the refusal, got %+v, want the abort", m)
	}
}
