package runtime

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// The store is the rendezvous of a multi-process run, served by rank 0's process at the
// master address. Every worker (rank 0's own included, over loopback) connects to it,
// proves the run token, and says who it is: rank, world size, the plan's hash, the address
// its peers reach it at. The store refuses a rank whose plan or world size differs from the
// run's (and stops the run: the processes were started on different plans), and a rank
// that joined already; once every rank has joined it sends each the peers' addresses.
//
// For the rest of the run it is the control plane: gathers (the end of every step, where
// the losses are summed and a stop asked by any rank is agreed on; checkpoint saves; the
// final goodbye), heartbeats (each worker reports what it is doing every second, so that
// when one dies the others are told which and what it was doing), and aborts (the first
// failure anywhere is sent to every rank, which stops at once).

// ctrlMsg is every control message, in either direction (JSON in a frameCtrl frame).
type ctrlMsg struct {
	Type     string            `json:"type"` // hello, welcome, refused, status, ping, gather, gathered, abort, bye
	Rank     int               `json:"rank,omitempty"`
	World    int               `json:"world,omitempty"`
	PlanHash string            `json:"plan_hash,omitempty"`
	Addr     string            `json:"addr,omitempty"`
	Host     string            `json:"host,omitempty"`
	PID      int               `json:"pid,omitempty"`
	Peers    []string          `json:"peers,omitempty"`
	Start    int64             `json:"start,omitempty"` // unix ns: the run's common clock origin
	Key      string            `json:"key,omitempty"`
	Root     bool              `json:"root,omitempty"` // gather: only rank 0 receives the data
	Data     json.RawMessage   `json:"data,omitempty"`
	All      []json.RawMessage `json:"all,omitempty"`
	Status   string            `json:"status,omitempty"`
	Error    string            `json:"error,omitempty"`
	Input    bool              `json:"input,omitempty"` // abort: the cause is bad input (another plan)
}

// maxCtrl bounds a control message (a rank's share of a gathered trace is sent in pieces).
const maxCtrl = 64 << 20

// decodeCtrl reads a control message defensively (the fuzz target's entry for it).
func decodeCtrl(payload []byte) (*ctrlMsg, error) {
	var m ctrlMsg
	if err := json.Unmarshal(payload, &m); err != nil {
		return nil, fmt.Errorf("control message: %v", err)
	}
	if m.Type == "" {
		return nil, errors.New("control message without a type")
	}
	return &m, nil
}

func writeCtrl(c net.Conn, mu *sync.Mutex, m *ctrlMsg) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	c.SetWriteDeadline(time.Now().Add(30 * time.Second))
	defer c.SetWriteDeadline(time.Time{})
	return writeFrame(c, frameHeader{kind: frameCtrl}, b)
}

func readCtrl(c net.Conn) (*ctrlMsg, error) {
	h, p, err := readFrame(c, maxCtrl, func(n int) []byte { return make([]byte, n) })
	if err != nil {
		return nil, err
	}
	if h.kind != frameCtrl {
		return nil, fmt.Errorf("a data frame on the control connection")
	}
	return decodeCtrl(p)
}

type storeWorker struct {
	rank     int
	conn     net.Conn
	wmu      sync.Mutex
	host     string
	pid      int
	lastSeen time.Time
	status   string
	bye      bool
}

func (w *storeWorker) name() string {
	return fmt.Sprintf("rank %d (%s, pid %d)", w.rank, w.host, w.pid)
}

type gatherRound struct {
	data []json.RawMessage
	have []bool
	n    int
	root bool
}

type store struct {
	world     int
	token     []byte
	planHash  string
	ln        net.Listener
	heartbeat time.Duration // a worker silent this long is dead
	log       func(string)

	mu      sync.Mutex
	workers []*storeWorker
	addrs   []string // where each rank's peers reach it
	joined  int
	rounds  map[string]*gatherRound
	aborted *ctrlMsg // the abort sent to every worker, and to any that joins later
	start   time.Time
	closed  bool
	dropped int
	done    chan struct{}
}

func newStore(ln net.Listener, world int, token []byte, planHash string, heartbeat time.Duration, log func(string)) *store {
	s := &store{world: world, token: token, planHash: planHash, ln: ln, heartbeat: heartbeat, log: log,
		workers: make([]*storeWorker, world), addrs: make([]string, world), rounds: map[string]*gatherRound{}, done: make(chan struct{})}
	go s.accept()
	go s.watch()
	return s
}

func (s *store) close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	ws := slices.Clone(s.workers)
	s.mu.Unlock()
	close(s.done)
	s.ln.Close()
	for _, w := range ws {
		if w != nil {
			w.conn.Close()
		}
	}
}

func (s *store) accept() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		go s.serve(c)
	}
}

// drop closes a connection that is not one of the run's workers, and says so (the first
// few times: a port scanner must not flood the log).
func (s *store) drop(c net.Conn, err error) {
	c.Close()
	s.mu.Lock()
	s.dropped++
	n := s.dropped
	s.mu.Unlock()
	if n <= 3 {
		s.log(fmt.Sprintf("rendezvous: dropped a connection from %s: %v", c.RemoteAddr(), err))
	}
}

func (s *store) serve(c net.Conn) {
	purpose, rank, err := acceptHandshake(c, s.token)
	if err == nil && purpose != purposeStore {
		err = errors.New("a peer connection at the rendezvous")
	}
	if err != nil {
		s.drop(c, err)
		return
	}
	c.SetReadDeadline(time.Now().Add(handshakeWait))
	hello, err := readCtrl(c)
	c.SetReadDeadline(time.Time{})
	if err == nil && (hello.Type != "hello" || hello.Rank != rank) {
		err = fmt.Errorf("expected the hello of rank %d", rank)
	}
	if err != nil {
		s.drop(c, err)
		return
	}
	var wmu sync.Mutex
	refuse := func(msg string, fatal bool) {
		writeCtrl(c, &wmu, &ctrlMsg{Type: "refused", Error: msg})
		c.Close()
		if fatal {
			s.abortWith(&ctrlMsg{Type: "abort", Error: msg, Input: true})
		} else {
			s.log("rendezvous: " + msg)
		}
	}
	who := fmt.Sprintf("rank %d (%s, pid %d)", rank, hello.Host, hello.PID)
	if hello.World != s.world || hello.PlanHash != s.planHash {
		refuse(fmt.Sprintf("%s runs plan %s with world size %d, but rank 0 runs plan %s with world size %d: every process must run the same compiled plan",
			who, short(hello.PlanHash), hello.World, short(s.planHash), s.world), true)
		return
	}
	w := &storeWorker{rank: rank, conn: c, host: hello.Host, pid: hello.PID, lastSeen: time.Now(), status: "waiting for the other ranks to join"}
	s.mu.Lock()
	if ab := s.aborted; ab != nil {
		// The run was stopped before this rank joined (another process was refused while
		// rank 0's own worker was still connecting): tell it, or it would wait for the
		// rendezvous to time out.
		s.mu.Unlock()
		writeCtrl(c, &w.wmu, ab)
		c.Close()
		return
	}
	switch {
	case rank >= s.world:
		s.mu.Unlock()
		refuse(fmt.Sprintf("%s is not a rank of the %d-rank world", who, s.world), false)
		return
	case s.workers[rank] != nil:
		prev := s.workers[rank]
		s.mu.Unlock()
		refuse(fmt.Sprintf("%s: %s joined first", who, prev.name()), false)
		return
	}
	s.workers[rank] = w
	s.addrs[rank] = hello.Addr
	s.joined++
	var peers []string
	var ws []*storeWorker
	if s.joined == s.world {
		s.start = time.Now()
		peers, ws = slices.Clone(s.addrs), slices.Clone(s.workers)
	}
	s.mu.Unlock()
	for _, x := range ws {
		writeCtrl(x.conn, &x.wmu, &ctrlMsg{Type: "welcome", Peers: peers, Start: s.start.UnixNano()})
	}
	s.run(w)
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// run serves one worker's control messages until its connection ends.
func (s *store) run(w *storeWorker) {
	for {
		m, err := readCtrl(w.conn)
		s.mu.Lock()
		if err != nil {
			bye, closed := w.bye, s.closed
			status := w.status
			s.mu.Unlock()
			if !bye && !closed {
				s.abort(fmt.Sprintf("%s died or closed its connection (%v); it was %s", w.name(), errText(err), status))
			}
			return
		}
		w.lastSeen = time.Now()
		if m.Status != "" {
			w.status = m.Status
		}
		s.mu.Unlock()
		switch m.Type {
		case "gather":
			s.gather(w.rank, m)
		case "abort":
			s.abort(m.Error)
		case "bye":
			s.mu.Lock()
			w.bye = true
			s.mu.Unlock()
			s.gather(w.rank, &ctrlMsg{Type: "gather", Key: "bye"})
		}
	}
}

func errText(err error) string {
	if errors.Is(err, net.ErrClosed) {
		return "closed"
	}
	return err.Error()
}

// gather records rank's part of round m.Key; when every rank has sent its part, every rank
// receives all parts (with Root, only rank 0 does; the others an empty answer).
func (s *store) gather(rank int, m *ctrlMsg) {
	s.mu.Lock()
	r := s.rounds[m.Key]
	if r == nil {
		r = &gatherRound{data: make([]json.RawMessage, s.world), have: make([]bool, s.world), root: m.Root}
		s.rounds[m.Key] = r
	}
	if r.have[rank] {
		s.mu.Unlock()
		s.abort(fmt.Sprintf("rank %d sent its part of %q twice", rank, m.Key))
		return
	}
	r.have[rank], r.data[rank] = true, m.Data
	r.n++
	if r.n < s.world {
		s.mu.Unlock()
		return
	}
	delete(s.rounds, m.Key)
	ws := slices.Clone(s.workers)
	s.mu.Unlock()
	for _, w := range ws {
		out := &ctrlMsg{Type: "gathered", Key: m.Key, All: r.data}
		if r.root && w.rank != 0 {
			out.All = nil
		}
		writeCtrl(w.conn, &w.wmu, out)
	}
}

// abort tells every worker that the run stops, and why (the first cause wins).
func (s *store) abort(msg string) { s.abortWith(&ctrlMsg{Type: "abort", Error: msg}) }

func (s *store) abortWith(m *ctrlMsg) {
	s.mu.Lock()
	if s.aborted != nil {
		s.mu.Unlock()
		return
	}
	s.aborted = m
	ws := slices.Clone(s.workers)
	s.mu.Unlock()
	for _, w := range ws {
		if w != nil {
			writeCtrl(w.conn, &w.wmu, m)
		}
	}
}

// watch pings every worker each second and declares dead one that has sent nothing for the
// heartbeat timeout (a stopped or wedged process keeps its connections open).
func (s *store) watch() {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-tick.C:
		}
		s.mu.Lock()
		ws := slices.Clone(s.workers)
		var dead []string
		for _, w := range ws {
			if w != nil && !w.bye && time.Since(w.lastSeen) > s.heartbeat {
				dead = append(dead, fmt.Sprintf("%s stopped responding (nothing for %s); it was %s", w.name(), s.heartbeat, w.status))
			}
		}
		s.mu.Unlock()
		if len(dead) > 0 {
			sort.Strings(dead)
			s.abort(strings.Join(dead, "; "))
		}
		for _, w := range ws {
			if w != nil {
				writeCtrl(w.conn, &w.wmu, &ctrlMsg{Type: "ping"})
			}
		}
	}
}
