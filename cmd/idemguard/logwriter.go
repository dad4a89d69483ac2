package main

import (
	"io"
	"sync"
	"time"
)

// maxQueuedLog is how many bytes of log lines may wait for the writer
// before Write waits for it (nothing is dropped).
const maxQueuedLog = 1 << 20

// logLinger is how long the writer, woken by a line, lets more gather
// before it writes them (unless the queue is half full or the writer is
// closing): woken by every line, it cost a goroutine switch, often a
// thread's wake-up, per request.
const logLinger = time.Millisecond

// logWriter writes the process's log lines from one goroutine, each write
// carrying every line queued since the last one. slog's handlers call Write
// with their own mutex held, so a write(2) per line serializes every request
// behind the file or pipe; here Write only appends to a queue, and under load
// one write(2) carries many lines. A line reaches w a moment after Write
// returns (at most logLinger and a write later): on a crash (kill -9, an
// unrecovered panic) the lines queued in that moment are lost; Close writes
// everything queued.
type logWriter struct {
	w    io.Writer
	wake chan struct{} // one pending wake-up at most
	done chan struct{}

	mu      sync.Mutex
	drained *sync.Cond // the queue got shorter, or the writer stopped
	queue   []byte
	closed  bool
}

func newLogWriter(w io.Writer) *logWriter {
	l := &logWriter{w: w, wake: make(chan struct{}, 1), done: make(chan struct{})}
	l.drained = sync.NewCond(&l.mu)
	go l.run()
	return l
}

// Write queues a copy of p. After Close it writes p directly.
func (l *logWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	for len(l.queue) >= maxQueuedLog && !l.closed {
		l.drained.Wait()
	}
	if l.closed {
		l.mu.Unlock()
		<-l.done // after what was queued
		return l.w.Write(p)
	}
	l.queue = append(l.queue, p...)
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default: // a wake-up is pending already
	}
	return len(p), nil
}

func (l *logWriter) run() {
	defer close(l.done)
	var batch []byte
	for range l.wake {
		l.linger()
		l.mu.Lock()
		batch, l.queue = l.queue, batch[:0]
		l.mu.Unlock()
		if len(batch) > 0 {
			_, _ = l.w.Write(batch) // a log write error has nowhere to go
		}
		l.mu.Lock()
		l.drained.Broadcast()
		stop := l.closed && len(l.queue) == 0
		l.mu.Unlock()
		if stop {
			return
		}
	}
}

// linger waits logLinger unless the queue is half full or l is closing.
func (l *logWriter) linger() {
	l.mu.Lock()
	wait := !l.closed && len(l.queue) < maxQueuedLog/2
	l.mu.Unlock()
	if wait {
		time.Sleep(logLinger)
	}
}

// Close writes what is queued and stops the writer; later writes go to w
// directly.
func (l *logWriter) Close() error {
	l.mu.Lock()
	l.closed = true
	l.drained.Broadcast()
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
	<-l.done
	return nil
}
