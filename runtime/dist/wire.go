package dist

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// The wire format of multi-process runs. Every connection — a worker's to the store, a
// rank's to a peer — starts with a mutual challenge–response that proves both ends hold the
// run token (handshake), then carries frames: a fixed 32-byte header and a payload whose
// length the header states and the receiver bounds before reading a byte of it. Nothing on
// the wire is trusted before the handshake, and nothing after it is used before its header
// checks out, so garbage, a port scanner or a stale process of another run is dropped
// without a panic or an allocation it chose.

// frameMagic starts every frame header.
var frameMagic = [4]byte{'p', 'p', 'c', 'F'}

// Frame kinds.
const (
	frameP2P  byte = 1 // a send: a = tag, b = step
	frameColl byte = 2 // a collective's part: a = member-set hash, b = step<<32 | seq<<2 | phase
	frameCtrl byte = 3 // a control message (JSON) between a worker and the store
)

const frameHeaderSize = 32

type frameHeader struct {
	kind byte
	a, b int64
	n    uint64 // payload bytes
}

func (h frameHeader) encode() [frameHeaderSize]byte {
	var b [frameHeaderSize]byte
	copy(b[:4], frameMagic[:])
	b[4] = h.kind
	binary.LittleEndian.PutUint64(b[8:], uint64(h.a))
	binary.LittleEndian.PutUint64(b[16:], uint64(h.b))
	binary.LittleEndian.PutUint64(b[24:], h.n)
	return b
}

// decodeFrameHeader checks a header: the magic, a known kind, zero padding, and a payload of
// at most max bytes.
func decodeFrameHeader(b []byte, max uint64) (frameHeader, error) {
	if len(b) != frameHeaderSize {
		return frameHeader{}, fmt.Errorf("frame header of %d bytes, want %d", len(b), frameHeaderSize)
	}
	if !bytes.Equal(b[:4], frameMagic[:]) {
		return frameHeader{}, fmt.Errorf("not a ppc frame (starts %q)", b[:4])
	}
	h := frameHeader{kind: b[4], a: int64(binary.LittleEndian.Uint64(b[8:])), b: int64(binary.LittleEndian.Uint64(b[16:])),
		n: binary.LittleEndian.Uint64(b[24:])}
	switch h.kind {
	case frameP2P, frameColl, frameCtrl:
	default:
		return frameHeader{}, fmt.Errorf("unknown frame kind %d", h.kind)
	}
	if b[5] != 0 || b[6] != 0 || b[7] != 0 {
		return frameHeader{}, errors.New("frame header padding is not zero")
	}
	if h.n > max {
		return frameHeader{}, fmt.Errorf("frame of %d bytes, more than the %d this connection carries", h.n, max)
	}
	return h, nil
}

// readFrame reads one frame whose payload is at most max bytes; alloc gives the payload's
// memory.
func readFrame(r io.Reader, max uint64, alloc func(int) []byte) (frameHeader, []byte, error) {
	var hb [frameHeaderSize]byte
	if _, err := io.ReadFull(r, hb[:]); err != nil {
		return frameHeader{}, nil, err
	}
	h, err := decodeFrameHeader(hb[:], max)
	if err != nil {
		return h, nil, err
	}
	p := alloc(int(h.n))
	if _, err := io.ReadFull(r, p); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return h, nil, err
	}
	return h, p, nil
}

// writeFrame writes a header and its payload with one system call where it can.
func writeFrame(w io.Writer, h frameHeader, payload []byte) error {
	h.n = uint64(len(payload))
	hb := h.encode()
	if c, ok := w.(net.Conn); ok {
		bufs := net.Buffers{hb[:], payload}
		_, err := bufs.WriteTo(c)
		return err
	}
	if _, err := w.Write(hb[:]); err != nil {
		return err
	}
	_, err := w.Write(payload)
	return err
}

// The handshake. The acceptor sends a greeting and a fresh nonce; the dialer answers with
// what it connects as (the store or a peer, and its rank), its own nonce and an HMAC-SHA256
// under the run token of both nonces and its claims; the acceptor checks it and answers with
// an HMAC over the dialer's nonce, which the dialer checks. The token never crosses the wire,
// a recorded handshake cannot be replayed (fresh nonces), and the dialer knows it reached a
// process of its own run, not a stale one on a reused port.

var handshakeMagic = [8]byte{'p', 'p', 'c', '-', 'r', 'u', 'n', 1}

const (
	purposeStore uint32 = 1 // a worker joining the store
	purposePeer  uint32 = 2 // a rank connecting to a peer
)

const (
	nonceSize    = 32
	macSize      = sha256.Size
	greetingSize = len(handshakeMagic) + nonceSize
	helloSize    = len(handshakeMagic) + 4 + 4 + nonceSize + macSize
)

// handshakeWait bounds a handshake: a connection that does not complete one in time (a port
// scanner, a client of another protocol) is dropped.
var handshakeWait = 10 * time.Second

// errBadToken is a handshake whose MAC does not verify: a process of another run, or garbage.
var errBadToken = errors.New("the run token does not match (a process of another run, or not ppc)")

func handshakeMAC(token []byte, label string, parts ...[]byte) []byte {
	m := hmac.New(sha256.New, token)
	m.Write([]byte(label))
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}

func u32(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }

// acceptHandshake runs the acceptor's side on conn and returns what the dialer proved it is.
// It reads exactly helloSize bytes, so garbage costs nothing but the deadline.
func acceptHandshake(conn net.Conn, token []byte) (purpose uint32, rank int, err error) {
	conn.SetDeadline(time.Now().Add(handshakeWait))
	defer conn.SetDeadline(time.Time{})
	var greet [greetingSize]byte
	copy(greet[:], handshakeMagic[:])
	nonceS := greet[len(handshakeMagic):]
	if _, err := rand.Read(nonceS); err != nil {
		return 0, 0, err
	}
	if _, err := conn.Write(greet[:]); err != nil {
		return 0, 0, err
	}
	var hello [helloSize]byte
	if _, err := io.ReadFull(conn, hello[:]); err != nil {
		return 0, 0, fmt.Errorf("handshake: %w", err)
	}
	return checkHello(hello[:], nonceS, token, conn)
}

// checkHello verifies a dialer's hello (the fuzz target's entry) and, when w is not nil,
// answers it.
func checkHello(hello, nonceS, token []byte, w io.Writer) (purpose uint32, rank int, err error) {
	if len(hello) != helloSize || !bytes.Equal(hello[:len(handshakeMagic)], handshakeMagic[:]) {
		return 0, 0, errors.New("handshake: not a ppc run's hello")
	}
	p := hello[len(handshakeMagic):]
	pur, rk := p[0:4], p[4:8]
	nonceC := p[8 : 8+nonceSize]
	mac := p[8+nonceSize:]
	if !hmac.Equal(mac, handshakeMAC(token, "dialer", nonceS, pur, rk, nonceC)) {
		return 0, 0, errBadToken
	}
	purpose = binary.LittleEndian.Uint32(pur)
	r := binary.LittleEndian.Uint32(rk)
	if purpose != purposeStore && purpose != purposePeer {
		return 0, 0, fmt.Errorf("handshake: unknown purpose %d", purpose)
	}
	if r > 1<<30 {
		return 0, 0, fmt.Errorf("handshake: rank %d", r)
	}
	if w != nil {
		if _, err := w.Write(handshakeMAC(token, "acceptor", nonceC, pur, rk)); err != nil {
			return 0, 0, err
		}
	}
	return purpose, int(r), nil
}

// dialHandshake runs the dialer's side: it connects as purpose and rank.
func dialHandshake(conn net.Conn, token []byte, purpose uint32, rank int) error {
	conn.SetDeadline(time.Now().Add(handshakeWait))
	defer conn.SetDeadline(time.Time{})
	var greet [greetingSize]byte
	if _, err := io.ReadFull(conn, greet[:]); err != nil {
		return fmt.Errorf("handshake: %w", err)
	}
	if !bytes.Equal(greet[:len(handshakeMagic)], handshakeMagic[:]) {
		return errors.New("handshake: the other end is not a ppc run")
	}
	nonceS := greet[len(handshakeMagic):]
	hello := make([]byte, 0, helloSize)
	hello = append(hello, handshakeMagic[:]...)
	pur, rk := u32(purpose), u32(uint32(rank))
	nonceC := make([]byte, nonceSize)
	if _, err := rand.Read(nonceC); err != nil {
		return err
	}
	hello = append(hello, pur...)
	hello = append(hello, rk...)
	hello = append(hello, nonceC...)
	hello = append(hello, handshakeMAC(token, "dialer", nonceS, pur, rk, nonceC)...)
	if _, err := conn.Write(hello); err != nil {
		return err
	}
	var mac [macSize]byte
	if _, err := io.ReadFull(conn, mac[:]); err != nil {
		// The acceptor closes without answering when our MAC is wrong.
		return fmt.Errorf("handshake: no answer (%v): %w", err, errBadToken)
	}
	if !hmac.Equal(mac[:], handshakeMAC(token, "acceptor", nonceC, pur, rk)) {
		return errBadToken
	}
	return nil
}
