package dist

import "time"

// SetJoinNotes spaces the notes of a rank waiting while the run starts.
func SetJoinNotes(first, every time.Duration) (restore func()) {
	f, e := joinNoteFirst, joinNoteEvery
	joinNoteFirst, joinNoteEvery = first, every
	return func() { joinNoteFirst, joinNoteEvery = f, e }
}

// SetHangLimits sets the automatic hang limit's constants (HangLimit).
func SetHangLimits(first, min time.Duration, factor int) (restore func()) {
	f, m, k := hangFirstStep, hangMin, hangFactor
	hangFirstStep, hangMin, hangFactor = first, min, factor
	return func() { hangFirstStep, hangMin, hangFactor = f, m, k }
}

// SetHandshakeWait sets how long a connection has to complete its handshake.
func SetHandshakeWait(d time.Duration) (restore func()) {
	old := handshakeWait
	handshakeWait = d
	return func() { handshakeWait = old }
}

// SetPeerListening installs a hook that learns where each rank listens for its peers
// (called before the rank says hello at the rendezvous).
func SetPeerListening(f func(rank int, addr string)) (restore func()) {
	old := peerListening
	peerListening = f
	return func() { peerListening = old }
}

// Kill drops every connection of p at once, as the death of its process would.
func (p *Process) Kill() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.halt()
	p.comm.close()
	p.ctrl.Close()
	if p.store != nil {
		p.store.close()
	}
}

// Freeze stops p's heartbeats, as a stopped (SIGSTOP) or wedged process stops sending.
func (p *Process) Freeze() { p.halt() }
