package live

import (
	"cmp"
	"context"
	"errors"
	"io"
	"sync"
)

// Defaults of Config.
const (
	// DefaultMaxPerKey bounds the watchers of one key in one process.
	DefaultMaxPerKey = 100
	// DefaultMaxPerTenant bounds the watchers of one tenant in one process.
	DefaultMaxPerTenant = 1000
)

var (
	// ErrTooManyWatchers is returned by Hub.Admit and Hub.Attach when the
	// key or its tenant already has as many watchers as the Hub admits.
	ErrTooManyWatchers = errors.New("live: too many watchers of this key or tenant")
	// ErrLagged is returned by Hub.Attach and Cursor.Next when events the
	// cursor has not read were dropped to keep the Log within MaxBytes. The
	// caller falls back to the stored answer.
	ErrLagged = errors.New("live: events were dropped before this watcher read them")
	// ErrNoLog is returned by Hub.Attach when no execution of the key is
	// running in this process, or the one running is not the Run asked for.
	ErrNoLog = errors.New("live: no live execution of this key in this process")
	// ErrSuperseded ends the log of an execution when another execution of
	// its key opens a log in this process (its claim was taken over): its
	// readers read the row, and never continue with the other execution.
	ErrSuperseded = errors.New("live: another execution of this key superseded this one")
)

// Run names one execution of a key: its attempt and the nonce of the claim
// it runs under, as the row holds them (store.Record's Attempts and
// ClaimNonce). Two executions of one key never share a Run, so a reader
// that attaches to the Run the row names follows that execution and no
// other.
type Run struct {
	Attempt int
	Nonce   string
}

// Key names one idempotency key: tenant, scope and key hash.
type Key struct{ Tenant, Scope, KeyHash string }

// Config bounds a Hub. Zero fields take the defaults, except MaxBytes.
type Config struct {
	// MaxBytes bounds the events one Log keeps, counted as their wire form
	// (WireSize), the measure of a stored sequence: a log holds every event
	// of an execution exactly when its stored sequence would fit MaxBytes.
	// Required (the guard passes Config.MaxStreamBytes); NewHub panics
	// without it.
	MaxBytes int
	// MaxPerKey bounds the watchers of one key. Defaults to DefaultMaxPerKey.
	MaxPerKey int
	// MaxPerTenant bounds the watchers of one tenant. Defaults to
	// DefaultMaxPerTenant.
	MaxPerTenant int
}

// Hub holds the live logs of the executions running in this process and
// counts their watchers. The zero value is not usable; call NewHub. A Hub is
// safe for concurrent use.
type Hub struct {
	cfg       Config
	mu        sync.Mutex
	logs      map[Key]*Log
	perKey    map[Key]int
	perTenant map[string]int
}

// NewHub returns an empty Hub with cfg's bounds.
func NewHub(cfg Config) *Hub {
	if cfg.MaxBytes <= 0 {
		panic("live: Config.MaxBytes is required")
	}
	cfg.MaxPerKey = cmp.Or(cfg.MaxPerKey, DefaultMaxPerKey)
	cfg.MaxPerTenant = cmp.Or(cfg.MaxPerTenant, DefaultMaxPerTenant)
	return &Hub{cfg: cfg, logs: map[Key]*Log{}, perKey: map[Key]int{}, perTenant: map[string]int{}}
}

// Open starts the log of the execution r of k and returns it. The caller
// must own k's claim as r and must Close the log when the execution ends.
// A log still open for k (an execution whose claim was taken over) is
// closed with ErrSuperseded for its readers, who then read the row.
func (h *Hub) Open(k Key, r Run) *Log {
	l := &Log{hub: h, key: k, run: r, max: h.cfg.MaxBytes}
	h.mu.Lock()
	old := h.logs[k]
	h.logs[k] = l
	h.mu.Unlock()
	if old != nil {
		old.close(ErrSuperseded)
	}
	return l
}

// Current reports the execution of k whose log is open in this process.
func (h *Hub) Current(k Key) (Run, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if l := h.logs[k]; l != nil {
		return l.run, true
	}
	return Run{}, false
}

// Ticket is one admitted watcher; Release gives its place back. Release is
// idempotent.
type Ticket struct {
	once sync.Once
	h    *Hub
	k    Key
}

// Release gives the watcher's place back.
func (t *Ticket) Release() {
	t.once.Do(func() {
		t.h.mu.Lock()
		defer t.h.mu.Unlock()
		if t.h.perKey[t.k]--; t.h.perKey[t.k] <= 0 {
			delete(t.h.perKey, t.k)
		}
		if t.h.perTenant[t.k.Tenant]--; t.h.perTenant[t.k.Tenant] <= 0 {
			delete(t.h.perTenant, t.k.Tenant)
		}
	})
}

// Admit counts one more watcher of k, or returns ErrTooManyWatchers when k
// or its tenant is at its bound. Watchers that poll the database (the owner
// runs in another process) are admitted the same way as those that attach
// to a Log.
func (h *Hub) Admit(k Key) (*Ticket, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.admitLocked(k)
}

func (h *Hub) admitLocked(k Key) (*Ticket, error) {
	if h.perKey[k] >= h.cfg.MaxPerKey || h.perTenant[k.Tenant] >= h.cfg.MaxPerTenant {
		return nil, ErrTooManyWatchers
	}
	h.perKey[k]++
	h.perTenant[k.Tenant]++
	return &Ticket{h: h, k: k}, nil
}

// Attach returns a cursor of the execution r of k, running in this
// process, after its first after events (0: from the first event; the
// cursor's next event has sequence after+1). It returns ErrNoLog when no
// log of k is open here, or the open one is another execution's (read the
// row: it names the execution that counts), ErrLagged when the log has
// already dropped event after+1, and ErrTooManyWatchers over the Hub's
// bounds.
func (h *Hub) Attach(k Key, r Run, after int) (*Cursor, error) {
	h.mu.Lock()
	l := h.logs[k]
	if l == nil || l.run != r {
		h.mu.Unlock()
		return nil, ErrNoLog
	}
	t, err := h.admitLocked(k)
	h.mu.Unlock()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	dropped := l.first > max(after, 0)
	l.mu.Unlock()
	if dropped {
		t.Release()
		return nil, ErrLagged
	}
	return &Cursor{log: l, next: max(after, 0), ticket: t}, nil
}

// Watchers reports how many watchers of k are admitted (for tests and metrics).
func (h *Hub) Watchers(k Key) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.perKey[k]
}

// Log is the event sequence of one execution (one Run). Events are
// numbered in the order they are appended, from 1: the sequence. Append and
// Close are for the owner; readers use a Cursor.
type Log struct {
	hub *Hub
	key Key
	run Run
	max int

	mu     sync.Mutex
	events []Event // events[i] is event number first+i
	first  int     // number of events dropped from the front
	bytes  int
	done   bool
	err    error // why the log ended: nil (complete) or a reason
	// changed is closed at the next Append or Close, and taken away. A
	// reader that waits makes it: without one, an Append makes no channel.
	changed chan struct{}
}

// firstEvents is the room a Log makes for its first events at once, so
// that a short stream's are not copied at the second, third and fifth.
const firstEvents = 8

// Run is the execution the log belongs to.
func (l *Log) Run() Run { return l.run }

// Append adds an event, the next in sequence, and wakes every reader.
// Events beyond MaxBytes push the oldest out. Append after Close is
// ignored.
func (l *Log) Append(e Event) {
	l.mu.Lock()
	if l.done {
		l.mu.Unlock()
		return
	}
	if l.events == nil {
		l.events = make([]Event, 0, firstEvents)
	}
	l.events = append(l.events, e)
	l.bytes += WireSize(e)
	for l.bytes > l.max && len(l.events) > 1 {
		l.bytes -= WireSize(l.events[0])
		l.events[0] = Event{}
		l.events = l.events[1:]
		l.first++
	}
	ch := l.changed
	l.changed = nil
	l.mu.Unlock()
	if ch != nil {
		close(ch)
	}
}

// Close ends the log: readers get the remaining events, then io.EOF when err
// is nil (the execution completed and its answer is stored) or err itself.
// The log leaves the Hub, so later callers read the row instead. Close is
// idempotent; the first call decides.
func (l *Log) Close(err error) {
	l.close(err)
	l.hub.mu.Lock()
	if l.hub.logs[l.key] == l {
		delete(l.hub.logs, l.key)
	}
	l.hub.mu.Unlock()
}

func (l *Log) close(err error) {
	l.mu.Lock()
	if l.done {
		l.mu.Unlock()
		return
	}
	l.done, l.err = true, err
	ch := l.changed
	l.changed = nil
	l.mu.Unlock()
	if ch != nil {
		close(ch)
	}
}

// Cursor reads a Log in sequence. A Cursor is used by one goroutine; Close
// it to give its watcher place back.
type Cursor struct {
	log    *Log
	next   int
	ticket *Ticket
}

// Next returns the cursor's next event, waiting for it while the execution
// runs. At the end of the log it returns io.EOF (the execution completed) or
// the reason the log was closed with; ErrLagged when the event was dropped;
// ctx's error when ctx ends first.
func (c *Cursor) Next(ctx context.Context) (Event, error) {
	l := c.log
	for {
		l.mu.Lock()
		if c.next < l.first {
			l.mu.Unlock()
			return Event{}, ErrLagged
		}
		if i := c.next - l.first; i < len(l.events) {
			e := l.events[i]
			l.mu.Unlock()
			c.next++
			return e, nil
		}
		if l.done {
			err := cmp.Or(l.err, io.EOF)
			l.mu.Unlock()
			return Event{}, err
		}
		if l.changed == nil {
			l.changed = make(chan struct{})
		}
		ch := l.changed
		l.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return Event{}, ctx.Err()
		}
	}
}

// Read is the sequence of the last event the cursor returned (the number
// of events before its next one): after Next returns an event, that event
// is number Read of its execution.
func (c *Cursor) Read() int { return c.next }

// Run is the execution the cursor reads.
func (c *Cursor) Run() Run { return c.log.run }

// Close releases the cursor's watcher place.
func (c *Cursor) Close() { c.ticket.Release() }
