// Package testlog is the log sink of the module's tests: a buffer that concurrent writers (a
// logger, a child process's output) may share with the test reading it, and the JSON records it
// holds. It exists so that each test package does not carry its own locked buffer.
package testlog

import (
	"bufio"
	"bytes"
	"encoding/json"
	"sync"
	"testing"
)

// Buffer collects writes from any number of goroutines; its zero value is ready. With Mirror
// set, each write is also passed to Mirror.Log, so a failing test shows what was logged.
type Buffer struct {
	Mirror testing.TB

	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.Mirror != nil {
		b.Mirror.Log(string(bytes.TrimSpace(p)))
	}
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Reset forgets everything written so far.
func (b *Buffer) Reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Reset()
}

// Lines returns the JSON log records whose "msg" is msg (every record when msg is empty). A line
// that is not a JSON object fails the test: the module logs JSON only.
func (b *Buffer) Lines(t testing.TB, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader([]byte(b.String())))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("testlog: a log line is not JSON: %v: %s", err, sc.Text())
		}
		if msg == "" || m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}
