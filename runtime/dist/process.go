package dist

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"ppc.dev/ppc/runtime/fault"
)

// JoinOptions say how this process joins a multi-process run.
type JoinOptions struct {
	Rank   int    // this process's rank; the job must have been loaded with runtime.LoadRank(…, Rank)
	World  int    // the number of processes (the plan's world size)
	Master string // host:port of the store, which rank 0's process serves
	Token  string // the run token every process of the run holds
	// StoreListener, for rank 0, is the store's listener when the launcher opened it (ppc
	// run --nproc hands it over, so no other process can take the port); nil: rank 0
	// listens on Master.
	StoreListener net.Listener
	// Timeout fails a wait for a peer's message that lasts longer (0: automatic, see
	// HangLimit).
	Timeout time.Duration
	// Heartbeat: a process that sends nothing for this long is dead (0: 30 s).
	Heartbeat time.Duration
	// JoinTimeout bounds the rendezvous: every rank must have joined by then (0: 5 minutes).
	JoinTimeout time.Duration
	// Flags are the settings of the run that every process must share ("name=value", as
	// the command line gave them): a process started with others is refused at the
	// rendezvous, both named. Rank 0's are the run's.
	Flags []string
	// Log receives warnings and notes: dropped connections, refused ranks, what a rank
	// still waits for while the run starts.
	Log func(string)
}

// The automatic hang limit (JoinOptions.Timeout 0): a wait for a peer fails after
// hangFirstStep in the first step of the process (nothing is measured yet, and a first step
// may do one-time work: allocations, kernel selection), and afterwards after hangFactor
// times the slowest step so far, but never sooner than hangMin. A step's time bounds every
// wait in it (a rank waits for its peers within the step), so a tenfold margin keeps slow
// steps from false alarms, while a hang in a fast run is caught in a minute.
var (
	hangFirstStep = 5 * time.Minute
	hangMin       = time.Minute
	hangFactor    = 10
)

// HangLimit is the automatic limit of a wait for a peer after steps whose slowest took
// slowest (0: no step has completed).
func HangLimit(slowest time.Duration) time.Duration {
	if slowest <= 0 {
		return hangFirstStep
	}
	return max(hangMin, time.Duration(hangFactor)*slowest)
}

// joinNoteFirst and joinNoteEvery space the notes of a rank that waits while the run
// starts (for the rendezvous to answer, for other ranks to join, for a peer): the first
// after joinNoteFirst, then one every joinNoteEvery, so that a late or missing rank is
// named long before the join limit, without a line a second.
var (
	joinNoteFirst = 10 * time.Second
	joinNoteEvery = time.Minute
)

// noter says, at the spaced times, what a rank is waiting for.
type noter struct {
	next  time.Time
	start time.Time
	log   func(string)
}

func newNoter(log func(string)) *noter {
	now := time.Now()
	return &noter{next: now.Add(joinNoteFirst), start: now, log: log}
}

// note logs what() if a note is due.
func (n *noter) note(what func(waited time.Duration) string) {
	if now := time.Now(); !now.Before(n.next) {
		n.next = now.Add(joinNoteEvery)
		n.log(what(now.Sub(n.start).Round(time.Second)))
	}
}

// Process is this process's part in a multi-process run: its connection to the store
// (rank 0's process also serves the store) and the TCP transport to its peers.
type Process struct {
	Rank, World int
	Start       time.Time // the run's common clock origin, from the store
	// Transport says how the rank's messages and collectives travel when its device carries
	// them ("" when they go through host memory and TCP).
	Transport string

	opts  JoinOptions
	comm  *tcpComm
	store *store // rank 0's process only
	ctrl  net.Conn
	cwmu  sync.Mutex

	mu       sync.Mutex
	cond     *sync.Cond
	gathered map[string][]json.RawMessage
	remote   error // the abort the store sent
	lastCtrl time.Time
	closed   bool
	rounds   map[string]int
	status   func() string
	lastStep func() int64  // the last step this rank started
	left     string        // the first rank that finished its run and left, as the store said
	stop     chan struct{} // closed (once, by halt) when the heartbeat must stop
	stopOnce sync.Once
}

func (p *Process) halt() { p.stopOnce.Do(func() { close(p.stop) }) }

// RemoteError is the run stopped by what happened in another process, as the store
// reports it ("rank 2 (host, pid 123) died … while step 3, instruction 17 of 240 (…)").
type RemoteError struct {
	Msg string
	// Rank is the rank whose failure stopped the run (-1: not known), and Unresponsive
	// says that it stopped responding (its process is stopped or wedged, and will not
	// exit on its own) rather than failed or died.
	Rank         int
	Unresponsive bool
}

// remoteAbort is the RemoteError of the store's abort m.
func remoteAbort(m *ctrlMsg) *RemoteError {
	e := &RemoteError{Msg: m.Error, Rank: -1, Unresponsive: m.Unresponsive}
	if m.Cause != nil {
		e.Rank = *m.Cause
	}
	return e
}

func (e *RemoteError) Error() string { return e.Msg }

// Member is what this process's rank brings to the run, from its job (runtime.Job.Join).
type Member struct {
	PlanHash string // every process of a run must run the same plan
	// Peers are the ranks it sends to, receives from or shares a collective with, and
	// MaxMessage the largest message one of them may send it (its largest buffer).
	Peers      []int
	MaxMessage uint64
	// Status says what the rank is doing and LastStep the last step it started, for the
	// store's reports when another process must say why the run stopped.
	Status   func() string
	LastStep func() int64
}

// Join connects this process's rank m to the other processes of its run: the rendezvous
// (rank 0's process starts the store), then a TCP connection to each of its peers. From then
// on the rank's messages and collectives go through the process's transport (Comm).
func Join(o JoinOptions, m Member) (*Process, error) {
	if o.Heartbeat <= 0 {
		o.Heartbeat = 30 * time.Second
	}
	if o.JoinTimeout <= 0 {
		o.JoinTimeout = 5 * time.Minute
	}
	if o.Log == nil {
		o.Log = func(string) {}
	}
	token := []byte(o.Token)
	p := &Process{Rank: o.Rank, World: o.World, opts: o, gathered: map[string][]json.RawMessage{}, rounds: map[string]int{},
		stop: make(chan struct{}), lastCtrl: time.Now()}
	p.cond = sync.NewCond(&p.mu)
	p.status = m.Status
	p.lastStep = m.LastStep
	plan := m.PlanHash
	if o.Rank == 0 {
		ln := o.StoreListener
		if ln == nil {
			var err error
			if ln, err = net.Listen("tcp", o.Master); err != nil {
				return nil, fmt.Errorf("rank 0 serves the rendezvous at MASTER_ADDR:MASTER_PORT %s, and cannot listen there: %v (it must be an address of rank 0's machine, with a free port)", o.Master, err)
			}
		}
		p.store = newStore(ln, storeRun{world: o.World, token: token, planHash: plan, flags: o.Flags,
			heartbeat: o.Heartbeat, join: o.JoinTimeout, log: o.Log})
	}
	fail := func(err error) (*Process, error) {
		p.Close()
		return nil, err
	}
	// The store enforces the join limit once this rank has reached it, and names the
	// missing ranks; this rank's own deadline, a little later, is for a store that stops
	// answering.
	start := time.Now()
	deadline := start.Add(o.JoinTimeout + 5*time.Second)
	storeNotes := newNoter(o.Log)
	ctrl, err := dialRetry(o.Master, start.Add(o.JoinTimeout), func(c net.Conn) error { return dialHandshake(c, token, purposeStore, o.Rank) },
		func(last error) {
			storeNotes.note(func(waited time.Duration) string {
				return fmt.Sprintf("rank %d: waited %s for the rendezvous at %s, which rank 0's process serves (%v); trying until %s",
					o.Rank, waited, o.Master, errText(last), o.JoinTimeout)
			})
		})
	if err != nil {
		return fail(fmt.Errorf("rank %d cannot reach the rendezvous at %s: %v", o.Rank, o.Master, err))
	}
	p.ctrl = ctrl
	// Peers reach this rank on the interface it reaches the store by: loopback for --nproc,
	// the cluster network otherwise.
	host, _, _ := net.SplitHostPort(ctrl.LocalAddr().String())
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return fail(fmt.Errorf("rank %d: listen for peers on %s: %v", o.Rank, host, err))
	}
	defer ln.Close() // every peer has connected when Join returns
	if peerListening != nil {
		peerListening(o.Rank, ln.Addr().String())
	}
	hostname, _ := os.Hostname()
	if err := writeCtrl(ctrl, &p.cwmu, &ctrlMsg{Type: "hello", Rank: o.Rank, World: o.World, PlanHash: plan, Flags: o.Flags,
		Addr: ln.Addr().String(), Host: hostname, PID: os.Getpid()}); err != nil {
		return fail(fmt.Errorf("rank %d: rendezvous: %v", o.Rank, err))
	}
	welcome, err := p.awaitWelcome(deadline)
	if err != nil {
		return fail(err)
	}
	p.comm = newTCPComm(o.Rank, o.Timeout, m.MaxMessage)
	p.mu.Lock()
	p.lastCtrl = time.Now() // the store's silence counts from the welcome
	p.mu.Unlock()
	p.Start = time.Unix(0, welcome.Start)
	go p.readCtrl()
	go p.heartbeat()

	// Connect to every rank this one talks to: dial the lower ranks, accept the higher.
	peers := m.Peers
	errs := make(chan error, len(peers)+1)
	var want []int
	for _, s := range peers {
		if s < o.Rank {
			go func(s int) {
				notes := newNoter(o.Log)
				c, err := dialRetry(welcome.Peers[s], deadline, func(c net.Conn) error { return dialHandshake(c, token, purposePeer, o.Rank) },
					func(last error) {
						notes.note(func(waited time.Duration) string {
							return fmt.Sprintf("rank %d: waited %s to connect to rank %d at %s (%v)", o.Rank, waited, s, welcome.Peers[s], errText(last))
						})
					})
				if err == nil {
					err = p.comm.addPeer(s, c)
				}
				if err != nil {
					err = fmt.Errorf("rank %d: connect to rank %d at %s: %v", o.Rank, s, welcome.Peers[s], err)
				}
				errs <- err
			}(s)
		} else {
			want = append(want, s)
		}
	}
	go func() { errs <- p.acceptPeers(ln, want, deadline, token) }()
	for range len(peers) - len(want) + 1 {
		if err := <-errs; err != nil {
			return fail(err)
		}
	}
	if _, err := p.Gather("connected", nil, false); err != nil {
		return fail(err)
	}
	return p, nil
}

// peerListening, when set (by tests), learns where each rank listens for its peers.
var peerListening func(rank int, addr string)

// awaitWelcome waits at the rendezvous until every rank has joined (the store's welcome),
// the store refuses this rank or stops the run, or the deadline passes; meanwhile it says,
// at the noter's times, which ranks it is waiting for (the store's pings name them).
func (p *Process) awaitWelcome(deadline time.Time) (*ctrlMsg, error) {
	o := p.opts
	// A goroutine reads, so that notes and the deadline do not cut a frame in half; it
	// stops at the message that ends the wait, after which readCtrl owns the connection.
	msgs := make(chan *ctrlMsg)
	errc := make(chan error, 1)
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			m, err := readCtrl(p.ctrl)
			if err != nil {
				errc <- err
				return
			}
			select {
			case msgs <- m:
			case <-done:
				return
			}
			if m.Type != "ping" {
				return
			}
		}
	}()
	notes := newNoter(o.Log)
	waiting := "waiting for the other ranks to join"
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	timeout := time.NewTimer(time.Until(deadline))
	defer timeout.Stop()
	for {
		select {
		case m := <-msgs:
			switch m.Type {
			case "ping":
				if m.Status != "" {
					waiting = m.Status
				}
				continue
			case "refused":
				return nil, fault.Inputf("refused by the rendezvous at %s: %s", o.Master, m.Error)
			case "abort":
				if m.Input {
					return nil, fault.Inputf("%s", m.Error)
				}
				return nil, remoteAbort(m)
			case "welcome":
				if len(m.Peers) != o.World {
					return nil, fmt.Errorf("rendezvous sent %d addresses for %d ranks", len(m.Peers), o.World)
				}
				return m, nil
			}
			return nil, fmt.Errorf("rank %d: rendezvous at %s: unexpected %q before the run started", o.Rank, o.Master, m.Type)
		case err := <-errc:
			return nil, fmt.Errorf("rank %d: rendezvous at %s: %v", o.Rank, o.Master, errText(err))
		case <-timeout.C:
			p.ctrl.Close() // ends the reader
			return nil, fmt.Errorf("rank %d: the rendezvous at %s did not complete within %s; it was %s", o.Rank, o.Master, o.JoinTimeout, waiting)
		case <-tick.C:
			notes.note(func(waited time.Duration) string {
				return fmt.Sprintf("rank %d: joined the rendezvous %s ago, %s; giving up after %s", o.Rank, waited, waiting, o.JoinTimeout)
			})
		}
	}
}

// acceptPeers accepts the connections of the ranks in want (those above this one that it
// talks to) until each has connected or the deadline passes. Each connection's handshake
// runs on its own, as the store's do: a connection that never completes one (anyone who can
// reach the port) costs nothing but its own handshake limit, and cannot delay the peers.
func (p *Process) acceptPeers(ln net.Listener, want []int, deadline time.Time, token []byte) error {
	o := p.opts
	ln.(*net.TCPListener).SetDeadline(deadline)
	type arrival struct {
		conn net.Conn
		rank int
		err  error
	}
	arrivals := make(chan arrival)
	acceptErr := make(chan error, 1)
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				acceptErr <- err
				return
			}
			go func() {
				purpose, s, err := acceptHandshake(c, token)
				if err == nil && purpose != purposePeer {
					err = errors.New("a rendezvous connection at a peer's port")
				}
				select {
				case arrivals <- arrival{c, s, err}:
				case <-done:
					c.Close()
				}
			}()
		}
	}()
	pending := slices.Clone(want)
	for len(pending) > 0 {
		select {
		case a := <-arrivals:
			err := a.err
			if err == nil && !slices.Contains(pending, a.rank) {
				err = fmt.Errorf("rank %d is not a peer still expected", a.rank)
			}
			if err != nil {
				a.conn.Close()
				o.Log(fmt.Sprintf("rank %d: dropped a connection from %s: %v", o.Rank, a.conn.RemoteAddr(), err))
				continue
			}
			pending = slices.DeleteFunc(pending, func(x int) bool { return x == a.rank })
			if err := p.comm.addPeer(a.rank, a.conn); err != nil {
				return err
			}
		case err := <-acceptErr:
			return fmt.Errorf("rank %d: %s did not connect: %v", o.Rank, rankList("rank", pending), err)
		}
	}
	return nil
}

// dialRetry connects to addr until the deadline (the other process may not listen yet) and
// runs the handshake; waiting, if set, is told of each failed try. A handshake that fails
// on the token is final: another run holds the address.
func dialRetry(addr string, deadline time.Time, handshake func(net.Conn) error, waiting func(last error)) (net.Conn, error) {
	var last error
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", addr, time.Until(deadline))
		if err == nil {
			if err = handshake(c); err == nil {
				return c, nil
			}
			c.Close()
			if errors.Is(err, errBadToken) {
				return nil, err
			}
		}
		last = err
		if waiting != nil {
			waiting(last)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if last == nil {
		last = errors.New("timed out")
	}
	return nil, last
}

func (p *Process) readCtrl() {
	for {
		m, err := readCtrl(p.ctrl)
		p.mu.Lock()
		if err != nil {
			if !p.closed && p.remote == nil {
				p.remote = &RemoteError{Msg: fmt.Sprintf("lost the connection to the rendezvous (rank 0's process): %s; rank 0 died or stopped", errText(err)), Rank: 0}
				p.comm.Abort(p.remote)
			}
			p.cond.Broadcast()
			p.mu.Unlock()
			return
		}
		p.lastCtrl = time.Now()
		switch m.Type {
		case "gathered":
			p.gathered[m.Key] = m.All
		case "abort":
			if p.remote == nil {
				p.remote = remoteAbort(m)
				p.comm.Abort(p.remote)
			}
		case "left":
			// Every rank leaves after the same last step: a rank still in a step waits for
			// the one that left in vain, so the step fails now (this rank's own failure: it
			// is the one that went on). A rank done with its steps only closes, so the abort
			// of its transport changes nothing for it.
			if p.left == "" {
				p.left = m.Error
				p.comm.Abort(fmt.Errorf("%s, but rank %d had steps left to run", m.Error, p.Rank))
			}
		}
		p.cond.Broadcast()
		p.mu.Unlock()
	}
}

// heartbeat reports what this rank is doing every second (or a quarter of the heartbeat
// timeout, if shorter), and stops the run when the store has been silent for the timeout.
func (p *Process) heartbeat() {
	tick := time.NewTicker(pingEvery(p.opts.Heartbeat))
	defer tick.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-tick.C:
		}
		p.mu.Lock()
		silent := time.Since(p.lastCtrl)
		if silent > p.opts.Heartbeat && p.remote == nil {
			p.remote = &RemoteError{Msg: fmt.Sprintf("the rendezvous (rank 0's process) sent nothing for %s: rank 0 is stopped or wedged", silent.Round(time.Second)),
				Rank: 0, Unresponsive: true}
			p.comm.Abort(p.remote)
			p.cond.Broadcast()
		}
		p.mu.Unlock()
		p.Report(p.status())
	}
}

// Report tells the store what this rank is doing now.
func (p *Process) Report(status string) {
	writeCtrl(p.ctrl, &p.cwmu, &ctrlMsg{Type: "status", Status: status})
}

// Gather sends this rank's part of a round (data, as JSON) and waits for everyone's, by rank
// (rank 0's process receives the parts; with root, the others only learn that the round
// completed). Rounds of one key are numbered: every rank must gather the same keys in the
// same order.
func (p *Process) Gather(key string, data any, root bool) ([]json.RawMessage, error) {
	raw, err := json.Marshal(data)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	n := p.rounds[key]
	p.rounds[key] = n + 1
	key += "#" + strconv.Itoa(n) // rounds of one name are numbered: every rank counts them alike
	p.mu.Unlock()
	if err := writeCtrl(p.ctrl, &p.cwmu, &ctrlMsg{Type: "gather", Key: key, Root: root, Data: raw, Status: p.status()}); err != nil {
		return nil, fmt.Errorf("rendezvous: %v", err)
	}
	return p.waitKey(key)
}

// Fail reports this rank's failure to every other process and returns the error to report
// here: this rank's own, unless it only lost a peer, in which case the store's account of
// what happened to that peer (which arrives within moments) says more.
func (p *Process) Fail(err error) error {
	var re *RemoteError
	if errors.As(err, &re) {
		return err
	}
	var pe *PeerError
	if errors.As(err, &pe) {
		p.mu.Lock()
		deadline := time.Now().Add(3 * time.Second)
		for p.remote == nil && time.Now().Before(deadline) {
			p.mu.Unlock()
			time.Sleep(50 * time.Millisecond)
			p.mu.Lock()
		}
		remote := p.remote
		p.mu.Unlock()
		if remote != nil {
			return remote
		}
	}
	writeCtrl(p.ctrl, &p.cwmu, &ctrlMsg{Type: "abort", Error: fmt.Sprintf("rank %d failed: %v", p.Rank, err)})
	return err
}

// stepEnd is what each rank reports at the end of a step.
type stepEnd struct {
	LossSum wireFloat `json:"loss_sum"`
	LossN   int       `json:"loss_n"`
	Nanos   int64     `json:"ns"`
	Stop    bool      `json:"stop,omitempty"`
	// Metrics are the rank's METRIC values (see StepResult.Metrics).
	Metrics map[string]wireFloat `json:"metrics,omitempty"`
	// Sums are the rank's summed METRIC values, over its micro-batches.
	Sums map[string]wireFloat `json:"sums,omitempty"`
}

// wireFloat is a float64 that crosses the control connection whatever its value: JSON has
// no NaN or infinity, and a diverged step's loss is exactly what every process must learn
// (encoding/json refuses them, which would stop the run with an encoding error instead).
type wireFloat float64

func (f wireFloat) MarshalJSON() ([]byte, error) {
	v := float64(f)
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return json.Marshal(strconv.FormatFloat(v, 'g', -1, 64)) // "NaN", "+Inf", "-Inf"
	}
	return json.Marshal(v)
}

func (f *wireFloat) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || !(math.IsNaN(v) || math.IsInf(v, 0)) {
			return fmt.Errorf("not a float: %q", s)
		}
		*f = wireFloat(v)
		return nil
	}
	var v float64
	err := json.Unmarshal(b, &v)
	*f = wireFloat(v)
	return err
}

// EndStep agrees with every process on the outcome of a step in which this rank's losses
// summed to lossSum over lossN micro-batches, took took, recorded metrics and asked to stop
// or not: the losses summed over every rank, each rank's step time, whether any rank asked
// to stop, and the metrics (each the lowest recording rank's) and sums (each summed over the
// processes, in rank order).
func (p *Process) EndStep(lossSum float64, lossN int, took time.Duration, stop bool, metrics, sums map[string]float64) (sum float64, n int, times []time.Duration, anyStop bool, all, allSums map[string]float64, err error) {
	mine := stepEnd{LossSum: wireFloat(lossSum), LossN: lossN, Nanos: int64(took), Stop: stop}
	for k, v := range metrics {
		if mine.Metrics == nil {
			mine.Metrics = map[string]wireFloat{}
		}
		mine.Metrics[k] = wireFloat(v)
	}
	for k, v := range sums {
		if mine.Sums == nil {
			mine.Sums = map[string]wireFloat{}
		}
		mine.Sums[k] = wireFloat(v)
	}
	parts, err := p.Gather("step", mine, false)
	if err != nil {
		return 0, 0, nil, false, nil, nil, err
	}
	var slowest time.Duration
	for r, raw := range parts {
		var e stepEnd
		if err := json.Unmarshal(raw, &e); err != nil {
			return 0, 0, nil, false, nil, nil, fmt.Errorf("rank %d's step report: %v", r, err)
		}
		for k, v := range e.Sums {
			if allSums == nil {
				allSums = map[string]float64{}
			}
			allSums[k] += float64(v)
		}
		sum += float64(e.LossSum)
		n += e.LossN
		times = append(times, time.Duration(e.Nanos))
		slowest = max(slowest, time.Duration(e.Nanos))
		anyStop = anyStop || e.Stop
		for k, v := range e.Metrics {
			if _, ok := all[k]; !ok {
				if all == nil {
					all = map[string]float64{}
				}
				all[k] = float64(v)
			}
		}
	}
	p.comm.stepTook(slowest) // every rank sees the same times, so all agree on the limit
	return sum, n, times, anyStop, all, allSums, nil
}

// Close ends the run for this process: a last gather (so that rank 0's store stays up
// until every process is done with it), then every connection closes.
func (p *Process) Close() error {
	var err error
	p.mu.Lock()
	ok := !p.closed && p.remote == nil && p.ctrl != nil && p.comm != nil
	p.mu.Unlock()
	if ok {
		writeCtrl(p.ctrl, &p.cwmu, &ctrlMsg{Type: "bye", Status: fmt.Sprintf("after step %d", p.lastStep())})
		_, err = p.waitKey("bye")
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return err
	}
	p.closed = true
	p.mu.Unlock()
	p.halt()
	if p.comm != nil {
		p.comm.close()
	}
	if p.ctrl != nil {
		p.ctrl.Close()
	}
	if p.store != nil {
		p.store.close()
	}
	return err
}

// waitKey waits until the store sends round key's parts, or the run stops.
func (p *Process) waitKey(key string) ([]json.RawMessage, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		if all, ok := p.gathered[key]; ok {
			delete(p.gathered, key)
			return all, nil
		}
		if p.remote != nil {
			return nil, p.remote
		}
		p.cond.Wait()
	}
}

// Abort tells every other process that this one fails with err, so that they stop now with
// its message rather than when they next wait for it.
func (p *Process) Abort(err error) {
	if p == nil || err == nil {
		return
	}
	p.mu.Lock()
	remote := p.remote != nil
	p.mu.Unlock()
	if remote {
		return // the run is already stopping, for a reason another process gave
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "rank ") {
		msg = fmt.Sprintf("rank %d failed: %s", p.Rank, msg)
	}
	writeCtrl(p.ctrl, &p.cwmu, &ctrlMsg{Type: "abort", Error: msg})
}

// Comm is the transport of the process's rank: TCP to its peers, keeping the collectives'
// contract (doc.go).
func (p *Process) Comm() Comm { return p.comm }

// WaitLimit is how long a wait for a peer may last now before it is a hang (JoinOptions.Timeout,
// or HangLimit of the slowest step so far).
func (p *Process) WaitLimit() time.Duration {
	d, _ := p.comm.waitLimit()
	return d
}

// pingEvery is how often each side of the rendezvous pings the other: every second, or a
// quarter of the heartbeat timeout when that is shorter. A ping period equal to the timeout
// (a 1 s heartbeat) let ordinary scheduling jitter make a live store look silent, and a
// frozen rank's peers then blamed rank 0 instead of it.
func pingEvery(heartbeat time.Duration) time.Duration {
	return min(time.Second, max(heartbeat/4, time.Millisecond))
}
