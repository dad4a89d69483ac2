package main

import (
	"io"
	"sync"
)

// maxQueuedLog is how many bytes of log lines may wait for the writer
// before Write waits for it (nothing is dropped).
const maxQueuedLog = 1 << 20

// logWriter writes the process's log lines from one goroutine, each write
// carrying every line queued since the last one. slog's handlers call Write
// with their own mutex held, so a write(2) per line serializes every request
// behind the file or pipe; here Write only appends to a queue, and under load
// one write(2) carries many lines. A line reaches w a moment after Write
// returns: on a crash (kill -9, an unrecovered panic) the lines queued in that
// moment are lost; Close writes everything queued.
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
