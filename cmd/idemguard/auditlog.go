package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/config"
	"github.com/idemguard/idemguard/internal/metrics"
	"github.com/idemguard/idemguard/store"
)

// auditQueueSize bounds the audit events waiting for the stream's writer.
const auditQueueSize = 10_000

// auditBatchBytes is about the most bytes one write of the stream carries.
const auditBatchBytes = 64 << 10

// auditStream writes audit events as JSON lines (json.Marshal of the event:
// its own MarshalJSON, the key as its prefix only), one per event, from one
// goroutine. Observe never blocks the request path: it hands the event to a
// bounded queue, and when the queue is full the event is dropped and counted
// (dropped(metrics.AuditDropQueueFull)); a line the sink refuses is counted
// as metrics.AuditDropWriteError. The audit table, not this stream, is the
// record of truth.
type auditStream struct {
	w       io.Writer
	closer  io.Closer // the file opened for the stream; nil for stdout/stderr
	dropped func(reason string)
	queue   chan store.AuditEvent
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
}

// openAuditStream opens the stream that dest names (config.Audit.Log):
// nil for off; stdout or stderr (given: serve's own stderr is its log
// queue, so audit lines never interleave a log line); else a file, appended
// to and created 0600.
func openAuditStream(dest string, stdout, stderr io.Writer, dropped func(string)) (*auditStream, error) {
	switch dest {
	case "", config.AuditLogOff:
		return nil, nil
	case config.AuditLogStdout:
		return newAuditStream(stdout, nil, auditQueueSize, dropped), nil
	case config.AuditLogStderr:
		return newAuditStream(stderr, nil, auditQueueSize, dropped), nil
	}
	f, err := os.OpenFile(dest, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	return newAuditStream(f, f, auditQueueSize, dropped), nil
}

func newAuditStream(w io.Writer, closer io.Closer, size int, dropped func(string)) *auditStream {
	a := &auditStream{w: w, closer: closer, dropped: dropped, queue: make(chan store.AuditEvent, size),
		stop: make(chan struct{}), done: make(chan struct{})}
	go a.run()
	return a
}

// Observe queues e for the writer, or drops and counts it when the queue is
// full. Safe for concurrent use; it never blocks.
func (a *auditStream) Observe(e store.AuditEvent) {
	select {
	case a.queue <- e:
	default:
		a.dropped(metrics.AuditDropQueueFull)
	}
}

func (a *auditStream) run() {
	defer close(a.done)
	var buf []byte
	for {
		select {
		case e := <-a.queue:
			buf = a.writeBatch(buf[:0], e)
		case <-a.stop:
			// Flush what was queued before Close.
			for {
				select {
				case e := <-a.queue:
					buf = a.writeBatch(buf[:0], e)
				default:
					return
				}
			}
		}
	}
}

// writeBatch writes e and the events queued behind it (up to about
// auditBatchBytes) in one write.
func (a *auditStream) writeBatch(buf []byte, e store.AuditEvent) []byte {
	n := 0
	add := func(e store.AuditEvent) {
		line, err := json.Marshal(e)
		if err != nil { // AuditEvent's MarshalJSON cannot fail; counted if it ever does
			a.dropped(metrics.AuditDropWriteError)
			return
		}
		buf = append(append(buf, line...), '\n')
		n++
	}
	add(e)
more:
	for len(buf) < auditBatchBytes {
		select {
		case e := <-a.queue:
			add(e)
		default:
			break more
		}
	}
	if n == 0 {
		return buf
	}
	if _, err := a.w.Write(buf); err != nil {
		for range n {
			a.dropped(metrics.AuditDropWriteError)
		}
	}
	return buf
}

// Close writes every event queued so far, stops the writer and closes the
// file. Events observed after Close are not written. It may be called
// twice.
func (a *auditStream) Close() error {
	var err error
	a.once.Do(func() {
		close(a.stop)
		<-a.done
		if a.closer != nil {
			err = a.closer.Close()
		}
	})
	return err
}

// auditConfig is the guard's audit configuration: the table when the store
// is MySQL (unless audit.table is false), the stream when audit.log names
// one, and the events counted by kind whenever either is on (they reach the
// guard's one observer, which hands them to the metrics and to the stream:
// observeEvent). Both off: auditing is off and costs nothing.
func (s *server) auditConfig(m *metrics.Metrics) (idemguard.AuditConfig, *auditStream, error) {
	table := s.cfg.Audit.Table && s.db != nil
	stream, err := openAuditStream(s.cfg.Audit.Log, s.env.stdout, s.env.stderr, m.AuditStreamDropped)
	if err != nil {
		return idemguard.AuditConfig{}, nil, err
	}
	if !table && stream == nil {
		s.log.Info("serve: audit trail off", "audit_table", s.cfg.Audit.Table, "store", s.storeName(), "audit_log", config.AuditLogOff)
		return idemguard.AuditConfig{}, nil, nil
	}
	s.log.Info("serve: audit trail on", "audit_table", table, "audit_log", s.cfg.Audit.Log)
	return idemguard.AuditConfig{Observe: true, Store: table}, stream, nil
}

// observeEvent hands the guard's audit events (EventAudit) to the stream;
// a nil stream (audit.log off) takes none.
func (a *auditStream) observeEvent(e idemguard.Event) {
	if a != nil && e.Kind == idemguard.EventAudit && e.Audit != nil {
		a.Observe(*e.Audit)
	}
}
