package runtime

import "io"

// SetWrapSaveFile installs a wrapper around the file a save writes (to inject failures) and
// returns the function that removes it.
func SetWrapSaveFile(f func(io.Writer) io.Writer) (restore func()) {
	old := wrapSaveFile
	wrapSaveFile = f
	return func() { wrapSaveFile = old }
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

// must returns v, panicking on err (a failed device read in a test).
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
