package dist

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The store is the rendezvous of a multi-process run, served by rank 0's process at the
// master address. Every worker (rank 0's own included, over loopback) connects to it,
// proves the run token, and says who it is: rank, world size, the plan's hash, the run
// flags it was started with, the address its peers reach it at. Until every rank has
// joined, a process whose plan, world size or flags differ from rank 0's stops the run (the
// processes were started differently: no rank could train right); a rank that joined
// already is refused alone, and so is any such stranger once the run has started (it must
// not stop a healthy run). Ranks that have not joined within the join limit are named to
// every rank that has, which stops. Once every rank has joined the store sends each the
// peers' addresses.
//
// For the rest of the run it is the control plane: gathers (the end of every step, where
// the losses are summed and a stop asked by any rank is agreed on; checkpoint saves; the
// final goodbye), heartbeats (each worker reports what it is doing every second, so that
// when one dies the others are told which and what it was doing), and aborts (the first
// failure anywhere is sent to every rank, which stops at once, with the rank that caused
// it). A rank that finishes its run while others go on is announced to them, so that none
// waits for it.

// ctrlMsg is every control message, in either direction (JSON in a frameCtrl frame).
type ctrlMsg struct {
	Type     string            `json:"type"` // hello, welcome, refused, status, ping, gather, gathered, abort, bye, left
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
	Flags    []string          `json:"flags,omitempty"` // hello: the run flags every process must share
	// Cause is, in an abort, the rank whose failure stopped the run (absent: none, or not
	// known); Unresponsive says that rank stopped responding rather than failed.
	Cause        *int `json:"cause,omitempty"`
	Unresponsive bool `json:"unresponsive,omitempty"`
}

// maxCtrl bounds a control message (a rank's share of a gathered trace is sent in pieces).
const maxCtrl = 64 << 20

// MaxGather bounds the data of one rank's part of a Gather: a control message's bound, less
// room for the rest of the message.
const MaxGather = maxCtrl - 1<<20

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

// storeRun is what the store knows of the run before any worker joins: rank 0's view.
type storeRun struct {
	world    int
	token    []byte
	planHash string
	flags    []string // rank 0's run flags ("name=value"), which every process must share
	// heartbeat: a worker silent this long, once the run has started, is dead (until then a
	// worker only waits, and sends nothing).
	heartbeat time.Duration
	join      time.Duration // every rank must have joined within this of the store's start
	log       func(string)
}

type store struct {
	storeRun
	ln      net.Listener
	created time.Time

	mu       sync.Mutex
	workers  []*storeWorker
	addrs    []string // where each rank's peers reach it
	joined   int
	rounds   map[string]*gatherRound
	aborted  *ctrlMsg // the abort sent to every worker, and to any that joins later
	start    time.Time
	closed   bool
	dropped  int
	refusals []string // the first few processes refused while ranks were joining
	done     chan struct{}
}

func newStore(ln net.Listener, run storeRun) *store {
	s := &store{storeRun: run, ln: ln, created: time.Now(),
		workers: make([]*storeWorker, run.world), addrs: make([]string, run.world), rounds: map[string]*gatherRound{}, done: make(chan struct{})}
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
			s.abortWith(&ctrlMsg{Type: "abort", Error: msg, Input: true, Cause: &rank})
			return
		}
		s.log("rendezvous: " + msg)
		s.mu.Lock()
		if s.joined < s.world && len(s.refusals) < 3 {
			s.refusals = append(s.refusals, msg)
		}
		s.mu.Unlock()
	}
	who := fmt.Sprintf("rank %d (%s, pid %d)", rank, hello.Host, hello.PID)
	s.mu.Lock()
	started := s.joined == s.world
	s.mu.Unlock()
	// A process started differently from rank 0 stops the run while it starts: the launch
	// is wrong, and no rank could train right. Once the run has started, the process is a
	// stranger (a stale worker, a mistaken launch) that holds the token: it is refused, and
	// the run goes on.
	if hello.World != s.world || hello.PlanHash != s.planHash {
		refuse(fmt.Sprintf("%s runs plan %s with world size %d, but rank 0 runs plan %s with world size %d: every process must run the same compiled plan",
			who, short(hello.PlanHash), hello.World, short(s.planHash), s.world), !started)
		return
	}
	if mine, theirs := flagDiff(hello.Flags, s.flags); mine != "" {
		refuse(fmt.Sprintf("%s was started with %s, but rank 0 with %s: every process of a run must be started with the same flags",
			who, mine, theirs), !started)
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
		// The workers heartbeat from the welcome on: their silence counts from now.
		for _, x := range ws {
			x.lastSeen = s.start
		}
	}
	s.mu.Unlock()
	for _, x := range ws {
		writeCtrl(x.conn, &x.wmu, &ctrlMsg{Type: "welcome", Peers: peers, Start: s.start.UnixNano()})
	}
	s.run(w)
}

// flagDiff compares a process's run flags with rank 0's ("name=value" each) and spells the
// flags that differ, as each side gave them ("" when none differ).
func flagDiff(theirs, rank0 []string) (mine, base string) {
	split := func(fs []string) map[string]string {
		m := map[string]string{}
		for _, f := range fs {
			k, v, _ := strings.Cut(f, "=")
			m[k] = v
		}
		return m
	}
	a, b := split(theirs), split(rank0)
	var names []string
	for k := range a {
		names = append(names, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	spell := func(m map[string]string, k string) string {
		v, ok := m[k]
		if !ok {
			return "no --" + k
		}
		return "--" + k + "=" + v
	}
	var x, y []string
	for _, k := range names {
		va, oka := a[k]
		vb, okb := b[k]
		if va != vb || oka != okb {
			x, y = append(x, spell(a, k)), append(y, spell(b, k))
		}
	}
	return strings.Join(x, " "), strings.Join(y, " ")
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
				s.abort(w.rank, fmt.Sprintf("%s died or closed its connection (%v); it was %s", w.name(), errText(err), status))
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
			s.abortWith(&ctrlMsg{Type: "abort", Error: m.Error, Cause: &w.rank})
		case "bye":
			s.leave(w)
			s.gather(w.rank, &ctrlMsg{Type: "gather", Key: "bye"})
		}
	}
}

// leave records that w finished its run. Every rank leaves after the same last step, so a
// rank still running a step, or waiting in a gather other than the goodbye, waits for w in
// vain: the others are told at once (they fail if they still need w), and a pending gather
// that lacks w's part stops the run now instead of never completing.
func (s *store) leave(w *storeWorker) {
	s.mu.Lock()
	w.bye = true
	msg := fmt.Sprintf("%s finished its run (%s) and left", w.name(), w.status)
	ws := slices.Clone(s.workers)
	var stuck string
	for key, r := range s.rounds {
		if !strings.HasPrefix(key, "bye") && !r.have[w.rank] {
			stuck = key
		}
	}
	s.mu.Unlock()
	for _, x := range ws {
		if x != nil && x != w {
			writeCtrl(x.conn, &x.wmu, &ctrlMsg{Type: "left", Rank: w.rank, Error: msg})
		}
	}
	if stuck != "" {
		s.abort(w.rank, fmt.Sprintf("%s, while the other ranks were at %s: every rank must run the same steps", msg, roundName(stuck, "their")))
	}
}

// roundName spells a gather's key for messages about whose round it is: "step#4", "the end
// of its 5th step in this run" (a resumed run's steps are numbered from the checkpoint's).
func roundName(key, whose string) string {
	name, n, _ := strings.Cut(key, "#")
	i, err := strconv.Atoi(n)
	if err != nil {
		return key
	}
	if name == "step" {
		return fmt.Sprintf("the end of %s %s step in this run", whose, ordinal(i+1))
	}
	return fmt.Sprintf("%s %s %q", whose, ordinal(i+1), name)
}

func ordinal(n int) string {
	suffix := "th"
	switch {
	case n%100 >= 11 && n%100 <= 13:
	case n%10 == 1:
		suffix = "st"
	case n%10 == 2:
		suffix = "nd"
	case n%10 == 3:
		suffix = "rd"
	}
	return strconv.Itoa(n) + suffix
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
		s.abort(rank, fmt.Sprintf("rank %d sent its part of %q twice", rank, m.Key))
		return
	}
	if !strings.HasPrefix(m.Key, "bye") {
		for _, w := range s.workers {
			if w != nil && w.bye {
				// A rank that left never sends its part: this round would never complete.
				msg := fmt.Sprintf("%s finished its run (%s) and left, but rank %d went on to %s: every rank must run the same steps",
					w.name(), w.status, rank, roundName(m.Key, "its"))
				s.mu.Unlock()
				s.abort(rank, msg)
				return
			}
		}
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

// abort tells every worker that the run stops because of rank's failure, and why (the
// first cause wins).
func (s *store) abort(rank int, msg string) {
	s.abortWith(&ctrlMsg{Type: "abort", Error: msg, Cause: &rank})
}

func (s *store) abortWith(m *ctrlMsg) {
	s.mu.Lock()
	if s.aborted != nil {
		s.mu.Unlock()
		return
	}
	s.aborted = m
	ws := slices.Clone(s.workers)
	s.mu.Unlock()
	// Rank 0's worker, in this process, learns last: once it has, it stops, and the store
	// closes with it; by then every other worker's message is on its way.
	for _, w := range append(ws[1:], ws[0]) {
		if w != nil {
			writeCtrl(w.conn, &w.wmu, m)
		}
	}
}

// watch pings every worker each second (pingEvery) and declares dead one that has sent nothing for the
// heartbeat timeout (a stopped or wedged process keeps its connections open). Until every
// rank has joined, the ping tells the waiting workers which ranks they wait for, and the
// workers are not expected to send anything; once the join limit has passed, the run stops
// naming the ranks that did not join.
func (s *store) watch() {
	tick := time.NewTicker(pingEvery(s.heartbeat))
	defer tick.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-tick.C:
		}
		s.mu.Lock()
		ws := slices.Clone(s.workers)
		started := s.joined == s.world
		var dead []string
		cause := -1
		for _, w := range ws {
			if started && w != nil && !w.bye && time.Since(w.lastSeen) > s.heartbeat {
				dead = append(dead, fmt.Sprintf("%s stopped responding (nothing for %s); it was %s", w.name(), s.heartbeat, w.status))
				if cause < 0 {
					cause = w.rank
				}
			}
		}
		var missing, joined []int
		for r, w := range ws {
			if w == nil {
				missing = append(missing, r)
			} else {
				joined = append(joined, r)
			}
		}
		refusals := slices.Clone(s.refusals)
		s.mu.Unlock()
		if len(dead) > 0 {
			s.abortWith(&ctrlMsg{Type: "abort", Error: strings.Join(dead, "; "), Cause: &cause, Unresponsive: true})
		}
		ping := &ctrlMsg{Type: "ping"}
		if !started {
			ping.Status = fmt.Sprintf("waiting for %s to join (%d of %d joined)", rankList("rank", missing), len(joined), s.world)
			if time.Since(s.created) > s.join {
				msg := fmt.Sprintf("%s did not join the rendezvous within %s (%s did): start one process per rank, 0 to %d, each with its own RANK",
					rankList("rank", missing), s.join, rankList("rank", joined), s.world-1)
				if len(refusals) > 0 {
					msg += "; refused meanwhile: " + strings.Join(refusals, "; ")
				}
				s.abortWith(&ctrlMsg{Type: "abort", Error: msg})
			}
		}
		for _, w := range ws {
			if w != nil {
				writeCtrl(w.conn, &w.wmu, ping)
			}
		}
	}
}

// rankList spells ranks for messages, runs of consecutive ranks as ranges: "rank 3",
// "ranks 0–2, 5".
func rankList(what string, ranks []int) string {
	if len(ranks) == 0 {
		return "no " + what
	}
	var parts []string
	for i := 0; i < len(ranks); {
		j := i
		for j+1 < len(ranks) && ranks[j+1] == ranks[j]+1 {
			j++
		}
		switch {
		case j == i:
			parts = append(parts, strconv.Itoa(ranks[i]))
		case j == i+1:
			parts = append(parts, strconv.Itoa(ranks[i]), strconv.Itoa(ranks[j]))
		default:
			parts = append(parts, fmt.Sprintf("%d–%d", ranks[i], ranks[j]))
		}
		i = j + 1
	}
	if len(ranks) == 1 {
		return what + " " + parts[0]
	}
	return what + "s " + strings.Join(parts, ", ")
}
