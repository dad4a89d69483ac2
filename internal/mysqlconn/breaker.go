package mysqlconn

import (
	"context"
	"database/sql/driver"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// ConnectError is the error of a pool that could not hand out a connection: dialing the server,
// or the handshake on the new connection, failed, or the server is known to be down (Down: a
// connection attempt failed moments ago and the background probe has not reached the server
// since). No statement was sent, so whatever the caller asked for did not happen.
type ConnectError struct {
	// Err is the failed attempt's error (for Down, the last one's).
	Err error
	// Down is true when the pool answered without dialing.
	Down bool
	// Since is, for Down, when the server was first found down.
	Since time.Time
}

func (e *ConnectError) Error() string {
	if e.Down {
		return fmt.Sprintf("mysqlconn: the database is down (no connection since %s; probing in the background): %v",
			e.Since.UTC().Format(time.RFC3339Nano), e.Err)
	}
	return fmt.Sprintf("mysqlconn: connecting to the database: %v", e.Err)
}

// Unwrap returns the attempt's error.
func (e *ConnectError) Unwrap() error { return e.Err }

// Probe pacing: the first probe follows the failure at once (a lost connection is often back by
// then), later ones back off to probeEveryMax, so that the service answers again well within a
// second of the database's return, for a few dials a second per replica while it is down.
const (
	probeEveryMin = 10 * time.Millisecond
	probeEveryMax = 250 * time.Millisecond
	// probeTimeout bounds one probe's dial and handshake (the DSN's own dial timeout may be
	// longer): a server that does not answer within it is still down.
	probeTimeout = 2 * time.Second
)

// breaker is the pool's connector. It dials through the driver's connector and, once a dial
// fails, remembers the server as down: every connection asked for then fails at once with a
// Down ConnectError, without queueing behind another dial, while one background probe dials with
// backoff until the server answers again. A pool whose server refuses connections thus answers
// every statement in microseconds, and recovers within probeEveryMax of the server's return.
//
// Only a failure the server (or the network) caused marks it down: a dial cut short by its
// caller's own deadline or cancellation says nothing about the server.
type breaker struct {
	driver.Connector

	mu      sync.Mutex
	down    bool
	since   time.Time
	lastErr error

	life    context.Context // canceled by Close: the probe returns
	stop    context.CancelFunc
	stopped bool
	probing sync.WaitGroup
}

var _ driver.Connector = (*breaker)(nil)

func newBreaker(c driver.Connector) *breaker {
	life, stop := context.WithCancel(context.Background())
	return &breaker{Connector: c, life: life, stop: stop}
}

// Connect implements driver.Connector.
func (b *breaker) Connect(ctx context.Context) (driver.Conn, error) {
	if err := b.downErr(); err != nil {
		return nil, err
	}
	slot := &dialed{}
	conn, err := b.Connector.Connect(context.WithValue(ctx, dialedKey{}, slot))
	if err != nil {
		if ctx.Err() == nil {
			b.markDown(err)
		}
		return nil, &ConnectError{Err: err}
	}
	return wrap(conn, slot.conn), nil
}

// downErr is the error of a connection asked for while the server is known down; nil when it
// is not.
func (b *breaker) downErr() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.down {
		return nil
	}
	return &ConnectError{Err: b.lastErr, Down: true, Since: b.since}
}

// markDown records a failed dial and starts the probe unless it runs already.
func (b *breaker) markDown(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lastErr = err
	if b.down || b.stopped {
		return
	}
	b.down, b.since = true, time.Now()
	b.probing.Add(1)
	go b.probe()
}

// probe dials, with backoff, until a connection succeeds (the server is up again: the pool
// dials normally from then on) or the pool is closed.
func (b *breaker) probe() {
	defer b.probing.Done()
	every := probeEveryMin
	for {
		t := time.NewTimer(every/2 + rand.N(every/2+1))
		select {
		case <-b.life.Done():
			t.Stop()
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(b.life, probeTimeout)
		conn, err := b.Connector.Connect(ctx)
		cancel()
		if err == nil {
			_ = conn.Close()
			b.mu.Lock()
			b.down, b.lastErr = false, nil
			b.mu.Unlock()
			return
		}
		b.mu.Lock()
		b.lastErr = err
		b.mu.Unlock()
		every = min(2*every, probeEveryMax)
	}
}

// Close stops the probe; database/sql calls it when the pool is closed.
func (b *breaker) Close() error {
	b.mu.Lock()
	if !b.stopped {
		b.stopped = true
		b.stop()
	}
	b.mu.Unlock()
	b.probing.Wait()
	return nil
}
