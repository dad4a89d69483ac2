package faulttest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// Proxy forwards TCP connections from a loopback port to a target (MySQL)
// and injects network faults. It is safe for concurrent use.
type Proxy struct {
	addr   string
	target string

	mu         sync.Mutex
	ln         net.Listener // nil while refusing
	links      map[*link]struct{}
	blackholed bool
	latMin     time.Duration
	latMax     time.Duration
	cutOn      []byte // armed: cut the connection after forwarding a chunk containing this
	cutThen    time.Duration
	cuts       int
	loseOn     []byte   // armed: send the next execution of a prepared statement containing this under an unknown id
	refuseOn   []byte   // armed: spoil the text of the next prepare of a statement containing this
	spoiled    []uint16 // the server's error numbers for the statements loseOn and refuseOn spoiled
	prepares   [][]byte // the text of every statement prepared through the proxy
	closed     bool
	wg         sync.WaitGroup
}

type link struct {
	client, server net.Conn
	once           sync.Once
	// The connection's prepared statements (under Proxy.mu), so that a
	// statement executed by id is matched by its text: preparing is the
	// text of a COM_STMT_PREPARE awaiting its reply, stmts the texts by
	// statement id.
	preparing []byte
	stmts     map[uint32][]byte
	// spoiling: a statement went out spoiled (LoseStatement,
	// RefusePrepare); the server's reply to it is recorded.
	spoiling bool
}

// MySQL command bytes and reply headers the proxy reads (the fifth byte of
// a packet, after its 3-byte length and sequence number).
const (
	comStmtPrepare = 0x16
	comStmtExecute = 0x17
	replyOK        = 0x00
	replyErr       = 0xff
)

// unknownStmtID is the statement id LoseStatement sends an execution
// under: one no server hands out this early in a connection's life.
const unknownStmtID = 0xfffffff0

// statement is the text a chunk sent to the server runs, for CutAfter's
// match: a prepared statement's text for its COM_STMT_EXECUTE, nothing for
// its COM_STMT_PREPARE (preparing runs nothing; the reply's statement id
// is recorded by noteReply), else the chunk itself (with interpolateParams,
// COM_QUERY and the statement's text). Called with p.mu held.
func (l *link) statement(chunk []byte) []byte {
	if len(chunk) < 5 {
		return chunk
	}
	switch chunk[4] {
	case comStmtPrepare:
		l.preparing = bytes.Clone(chunk[5:])
		return nil
	case comStmtExecute:
		if len(chunk) >= 9 {
			return l.stmts[binary.LittleEndian.Uint32(chunk[5:9])]
		}
	}
	return chunk
}

// noteReply records the statement id of a prepare's reply, and the
// server's answer to a statement LoseStatement or RefusePrepare spoiled.
// Called with p.mu held.
func (p *Proxy) noteReply(l *link, chunk []byte) {
	if l.spoiling && len(chunk) >= 5 {
		l.spoiling = false
		var code uint16
		if chunk[4] == replyErr && len(chunk) >= 7 {
			code = binary.LittleEndian.Uint16(chunk[5:7])
		}
		p.spoiled = append(p.spoiled, code)
	}
	if l.preparing == nil || len(chunk) < 5 {
		return
	}
	if chunk[4] == replyOK && len(chunk) >= 9 {
		if l.stmts == nil {
			l.stmts = map[uint32][]byte{}
		}
		l.stmts[binary.LittleEndian.Uint32(chunk[5:9])] = l.preparing
	}
	if chunk[4] == replyOK || chunk[4] == replyErr {
		l.preparing = nil
	}
}

func (l *link) close() {
	l.once.Do(func() {
		_ = l.client.Close()
		_ = l.server.Close()
	})
}

// NewProxy starts a proxy to target on a free loopback port; it is closed
// when the test ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("faulttest: listen: %v", err)
	}
	p := &Proxy{addr: ln.Addr().String(), ln: ln, target: target, links: map[*link]struct{}{}}
	p.wg.Add(1)
	go p.accept(ln)
	t.Cleanup(p.Close)
	return p
}

// ProxyDSN starts a Proxy to the server of dsn (a MySQL DSN) and returns
// it with dsn's config, its address changed to the proxy's: what a pool
// whose every connection goes through the proxy is opened with.
func ProxyDSN(t testing.TB, dsn string) (*Proxy, *mysql.Config) {
	t.Helper()
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatalf("faulttest: %v", err)
	}
	p := NewProxy(t, cfg.Addr)
	cfg.Addr = p.Addr()
	return p, cfg
}

// Addr is the proxy's address (host:port).
func (p *Proxy) Addr() string { return p.addr }

// Close stops the proxy and closes every connection through it.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.Refuse()
	p.wg.Wait()
}

// Refuse stops listening and closes every connection through the proxy:
// from now on a connection to Addr is refused, as by a database server that
// is down. Accept ends it.
func (p *Proxy) Refuse() {
	p.mu.Lock()
	ln := p.ln
	p.ln = nil
	p.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
	}
	p.Drop()
}

// Accept listens on Addr again after Refuse, as a database server that is
// back. The port was free meanwhile, and another socket may have taken it:
// Accept retries for a second, then reports the error.
func (p *Proxy) Accept() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil || p.closed {
		return nil
	}
	var ln net.Listener
	var err error
	for deadline := time.Now().Add(time.Second); ; time.Sleep(10 * time.Millisecond) {
		if ln, err = net.Listen("tcp", p.addr); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		return err
	}
	p.ln = ln
	p.wg.Add(1)
	go p.accept(ln)
	return nil
}

// Drop closes every connection open through the proxy, as a database
// restart or a network reset would. New connections are accepted.
func (p *Proxy) Drop() {
	p.mu.Lock()
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()
	for _, l := range links {
		l.close()
	}
}

// SetBlackhole starts (true) or ends (false) a blackhole: no byte is
// forwarded in either direction, connections stay open and new ones are
// accepted, as in a network partition. Held bytes flow again when it ends.
func (p *Proxy) SetBlackhole(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.blackholed = on
}

// Blackhole holds all traffic for d, then lets it flow again; it returns at once.
func (p *Proxy) Blackhole(d time.Duration) {
	p.SetBlackhole(true)
	time.AfterFunc(d, func() { p.SetBlackhole(false) })
}

// SetLatency delays every forwarded chunk by a random time in [lo, hi].
func (p *Proxy) SetLatency(lo, hi time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.latMin, p.latMax = lo, max(lo, hi)
}

// CutAfter arms a one-shot fault: the next chunk sent to the target that
// runs a statement containing pattern (with interpolateParams, a chunk
// holding the statement's text; for a prepared statement, its execution,
// not its prepare) is forwarded, and then its connection is closed before any reply comes
// back. The statement may well apply; its client never learns. When
// blackholeFor is positive, the cut also starts a blackhole that long, so
// the client cannot read the row back at once either.
func (p *Proxy) CutAfter(pattern string, blackholeFor time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cutOn, p.cutThen = []byte(pattern), blackholeFor
}

// LoseStatement arms a one-shot fault: the next execution of a prepared
// statement whose text contains pattern goes to the server under a
// statement id it never gave, as if the server had lost the statement;
// the server answers with an error (1243, unknown prepared statement
// handler) and runs nothing. SpoiledReplies says what it answered.
func (p *Proxy) LoseStatement(pattern string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.loseOn = []byte(pattern)
}

// RefusePrepare arms a one-shot fault: the next prepare of a statement
// whose text contains pattern goes to the server with its first byte
// spoiled, so that the server refuses to prepare it (1064, a syntax
// error), as a server that refuses prepared statements answers its
// client: with an error, on a connection that stays open.
// SpoiledReplies says what it answered.
func (p *Proxy) RefusePrepare(pattern string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refuseOn = []byte(pattern)
}

// SpoiledReplies are the server's error numbers for the statements
// LoseStatement and RefusePrepare spoiled, in order (0: the reply was not
// an error).
func (p *Proxy) SpoiledReplies() []uint16 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.spoiled)
}

// Prepares is how many times a statement whose text contains pattern was
// prepared through the proxy.
func (p *Proxy) Prepares(pattern string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, text := range p.prepares {
		if bytes.Contains(text, []byte(pattern)) {
			n++
		}
	}
	return n
}

// spoil applies an armed LoseStatement or RefusePrepare to chunk, sent
// to the server on l, which runs stmt. Called with p.mu held.
func (p *Proxy) spoil(l *link, chunk, stmt []byte) {
	if len(chunk) < 6 {
		return
	}
	switch chunk[4] {
	case comStmtPrepare:
		p.prepares = append(p.prepares, bytes.Clone(chunk[5:]))
		if p.refuseOn != nil && bytes.Contains(chunk[5:], p.refuseOn) {
			p.refuseOn, l.spoiling = nil, true
			chunk[5] = '!'
		}
	case comStmtExecute:
		if p.loseOn != nil && len(chunk) >= 9 && bytes.Contains(stmt, p.loseOn) {
			p.loseOn, l.spoiling = nil, true
			binary.LittleEndian.PutUint32(chunk[5:9], unknownStmtID)
		}
	}
}

// Cuts is how many connections CutAfter has cut.
func (p *Proxy) Cuts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cuts
}

func (p *Proxy) accept(ln net.Listener) {
	defer p.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		s, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		l := &link{client: c, server: s}
		p.mu.Lock()
		if p.closed || p.ln != ln { // closed, or refusing since this connection came in
			p.mu.Unlock()
			l.close()
			return
		}
		p.links[l] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(l, s, c, true)
		go p.pipe(l, c, s, false)
	}
}

// pipe copies src to dst chunk by chunk, applying the faults. toServer is
// the client-to-target direction.
func (p *Proxy) pipe(l *link, dst, src net.Conn, toServer bool) {
	defer p.wg.Done()
	defer func() {
		l.close()
		p.mu.Lock()
		delete(p.links, l)
		p.mu.Unlock()
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			chunk := buf[:n]
			if !p.hold(l) {
				return
			}
			cut := false
			p.mu.Lock()
			delay := p.latMin
			if p.latMax > p.latMin {
				delay += rand.N(p.latMax - p.latMin + 1)
			}
			var stmt []byte
			if toServer {
				stmt = l.statement(chunk)
				p.spoil(l, chunk, stmt)
			} else {
				p.noteReply(l, chunk)
			}
			if toServer && p.cutOn != nil && bytes.Contains(stmt, p.cutOn) {
				p.cutOn, cut = nil, true
				p.cuts++
				if d := p.cutThen; d > 0 {
					p.blackholed = true
					time.AfterFunc(d, func() { p.SetBlackhole(false) })
				}
			}
			p.mu.Unlock()
			if delay > 0 {
				time.Sleep(delay)
			}
			if _, werr := dst.Write(chunk); werr != nil {
				return
			}
			if cut {
				// Let the target read the statement before the cut, so it
				// runs; the reply has nowhere to go.
				time.Sleep(20 * time.Millisecond)
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// hold waits while the proxy is blackholed; false when the link closed meanwhile.
func (p *Proxy) hold(l *link) bool {
	for {
		p.mu.Lock()
		bh, closed := p.blackholed, p.closed
		_, open := p.links[l]
		p.mu.Unlock()
		if closed || !open {
			return false
		}
		if !bh {
			return true
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// ErrInjected is the error the fault Store returns by default.
var ErrInjected = errors.New("faulttest: injected fault")
