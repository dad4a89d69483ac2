package live

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var (
	k  = Key{Tenant: "acme", Scope: "chat", KeyHash: "h1"}
	r1 = Run{Attempt: 1, Nonce: "n1"}
)

func TestAppendSSE(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		ev   Event
		want string
	}{
		{"data only", Event{Data: []byte(`{"a":1}`)}, "data: {\"a\":1}\n\n"},
		{"id and type", Event{ID: "3", Type: "state", Data: []byte("x")}, "id: 3\nevent: state\ndata: x\n\n"},
		{"empty data", Event{Type: "ping"}, "event: ping\ndata: \n\n"},
		{"line breaks split data", Event{Data: []byte("a\nb\r\nc\rd")}, "data: a\ndata: b\ndata: c\ndata: d\n\n"},
		{"trailing newline", Event{Data: []byte("a\n")}, "data: a\ndata: \n\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, tc.ev.Valid())
			require.Equal(t, tc.want, string(AppendSSE(nil, tc.ev)))
		})
	}
	require.ErrorIs(t, Event{ID: "a\nb"}.Valid(), ErrInvalidEvent)
	require.ErrorIs(t, Event{Type: "a\rb"}.Valid(), ErrInvalidEvent)
	require.Equal(t, ": keep alive \n\n", string(Comment("keep alive\n")))
}

// ReadSSE gives back what AppendSSE wrote (line ends as \n), and skips
// comments and events without data.
func TestReadSSEReadsWhatAppendSSEWrites(t *testing.T) {
	t.Parallel()
	events := []Event{
		{Data: []byte(`{"a":1}`)}, {ID: "3", Type: "state", Data: []byte("x")}, {Type: "ping", Data: []byte{}},
		{Data: []byte("a\nb\nc")}, {Data: []byte("a\n")},
	}
	var wire []byte
	for i, e := range events {
		wire = AppendSSE(wire, e)
		if i == 1 {
			wire = append(wire, Comment("keep alive")...)
			wire = append(wire, "id: 9\n\n"...)
		}
	}
	r := bufio.NewReader(bytes.NewReader(wire))
	for _, want := range events {
		got, err := ReadSSE(r)
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	_, err := ReadSSE(r)
	require.ErrorIs(t, err, io.EOF)
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestCursorReadsFromTheStartThenLive(t *testing.T) {
	t.Parallel()
	h := NewHub(Config{MaxBytes: 1 << 20})
	l := h.Open(k, r1)
	l.Append(Event{Data: []byte("1")})
	l.Append(Event{Data: []byte("2")})

	c, err := h.Attach(k, r1, 0)
	require.NoError(t, err)
	defer c.Close()
	for _, want := range []string{"1", "2"} {
		e, err := c.Next(ctx(t))
		require.NoError(t, err)
		require.Equal(t, want, string(e.Data))
	}

	got := make(chan Event)
	go func() {
		e, err := c.Next(ctx(t))
		if err == nil {
			got <- e
		}
		close(got)
	}()
	l.Append(Event{Data: []byte("3")})
	e, ok := <-got
	require.True(t, ok, "the waiting reader is woken by Append")
	require.Equal(t, "3", string(e.Data))

	l.Close(nil)
	_, err = c.Next(ctx(t))
	require.ErrorIs(t, err, io.EOF)
	_, err = h.Attach(k, r1, 0)
	require.ErrorIs(t, err, ErrNoLog, "a closed log leaves the hub: later callers read the row")
}

func TestCloseWithReasonReachesReaders(t *testing.T) {
	t.Parallel()
	h := NewHub(Config{MaxBytes: 1 << 20})
	l := h.Open(k, r1)
	c, err := h.Attach(k, r1, 0)
	require.NoError(t, err)
	l.Append(Event{Data: []byte("1")})
	boom := errors.New("upstream failed")
	l.Close(boom)
	l.Close(nil) // the first Close decides
	l.Append(Event{Data: []byte("ignored")})
	e, err := c.Next(ctx(t))
	require.NoError(t, err, "events appended before Close are still delivered")
	require.Equal(t, "1", string(e.Data))
	_, err = c.Next(ctx(t))
	require.ErrorIs(t, err, boom)
}

func TestReopenEndsTheOldLogForItsReaders(t *testing.T) {
	t.Parallel()
	h := NewHub(Config{MaxBytes: 1 << 20})
	old := h.Open(k, r1)
	c, err := h.Attach(k, r1, 0)
	require.NoError(t, err)
	r2 := Run{Attempt: 2, Nonce: "n2"}
	fresh := h.Open(k, r2) // a takeover in this process
	_, err = c.Next(ctx(t))
	require.ErrorIs(t, err, ErrSuperseded)
	old.Close(nil) // must not remove the new log
	_, err = h.Attach(k, r1, 0)
	require.ErrorIs(t, err, ErrNoLog, "the old execution is not followed any more")
	c2, err := h.Attach(k, r2, 0)
	require.NoError(t, err)
	fresh.Append(Event{Data: []byte("new")})
	e, err := c2.Next(ctx(t))
	require.NoError(t, err)
	require.Equal(t, "new", string(e.Data))
	require.Equal(t, r2, c2.Run())
}

// A reader attaches to the execution the row names and no other: an old
// owner's log still open in this process (its operation outlived its
// claim) is not followed by a caller that read the new attempt's row.
func TestAttachIsBoundToOneExecution(t *testing.T) {
	t.Parallel()
	h := NewHub(Config{MaxBytes: 1 << 20})
	l := h.Open(k, r1)
	l.Append(Event{Data: []byte("A1")})
	for _, other := range []Run{{Attempt: 2, Nonce: "n2"}, {Attempt: 1, Nonce: "n2"}, {Attempt: 2, Nonce: "n1"}} {
		_, err := h.Attach(k, other, 0)
		require.ErrorIs(t, err, ErrNoLog, "%+v", other)
	}
	require.Zero(t, h.Watchers(k), "a refused attach holds no place")
	cur, ok := h.Current(k)
	require.True(t, ok)
	require.Equal(t, r1, cur)
	require.Equal(t, r1, l.Run())
	l.Close(nil)
	_, ok = h.Current(k)
	require.False(t, ok)
}

func TestAttachAfterASequenceNumber(t *testing.T) {
	t.Parallel()
	h := NewHub(Config{MaxBytes: 1 << 20})
	l := h.Open(k, r1)
	for i := 1; i <= 5; i++ {
		l.Append(Event{Data: []byte(fmt.Sprint(i))})
	}
	c, err := h.Attach(k, r1, 3)
	require.NoError(t, err)
	defer c.Close()
	for _, want := range []string{"4", "5"} {
		e, err := c.Next(ctx(t))
		require.NoError(t, err)
		require.Equal(t, want, string(e.Data))
		require.Equal(t, want, fmt.Sprint(c.Read()), "Read is the sequence of the event just returned")
	}
	l.Close(nil)
	_, err = c.Next(ctx(t))
	require.ErrorIs(t, err, io.EOF)
}

func TestWireSizeIsTheWireLength(t *testing.T) {
	t.Parallel()
	for _, e := range []Event{
		{}, {Data: []byte(`{"a":1}`)}, {ID: "1-2", Type: "delta", Data: []byte("x")},
		{Data: []byte("a\nb\r\nc\rd")}, {Data: []byte("a\r\n")}, {Data: []byte("\r")}, {Data: []byte("\n\n\r\r\n")},
	} {
		require.Equal(t, len(AppendSSE(nil, e)), WireSize(e), "%q", e.Data)
	}
}

func TestLogKeepsMaxBytes(t *testing.T) {
	t.Parallel()
	h := NewHub(Config{MaxBytes: 200})
	l := h.Open(k, r1)
	slow, err := h.Attach(k, r1, 0)
	require.NoError(t, err)
	for i := range 20 {
		l.Append(Event{Data: []byte(fmt.Sprintf("event-%02d", i))})
	}
	l.mu.Lock()
	require.LessOrEqual(t, l.bytes, 200)
	kept := 0
	for _, e := range l.events {
		kept += len(AppendSSE(nil, e))
	}
	require.Equal(t, kept, l.bytes, "the bound counts the wire form, as a stored sequence does")
	require.Positive(t, l.first)
	l.mu.Unlock()
	_, err = slow.Next(ctx(t))
	require.ErrorIs(t, err, ErrLagged, "a reader behind the ring's start is told, never handed a gap")
	_, err = h.Attach(k, r1, 0)
	require.ErrorIs(t, err, ErrLagged, "a new reader cannot start at the first event")
	l.mu.Lock()
	first := l.first
	l.mu.Unlock()
	c, err := h.Attach(k, r1, first)
	require.NoError(t, err, "a reader that has the dropped events may attach after them")
	c.Close()
}

func TestNextStopsWithContext(t *testing.T) {
	t.Parallel()
	h := NewHub(Config{MaxBytes: 1 << 20})
	h.Open(k, r1)
	c, err := h.Attach(k, r1, 0)
	require.NoError(t, err)
	cctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = c.Next(cctx)
	require.ErrorIs(t, err, context.Canceled)
}

func TestAdmitBoundsPerKeyAndTenant(t *testing.T) {
	t.Parallel()
	h := NewHub(Config{MaxBytes: 1 << 20, MaxPerKey: 2, MaxPerTenant: 3})
	a, err := h.Admit(k)
	require.NoError(t, err)
	_, err = h.Admit(k)
	require.NoError(t, err)
	_, err = h.Admit(k)
	require.ErrorIs(t, err, ErrTooManyWatchers)

	other := Key{Tenant: "acme", Scope: "chat", KeyHash: "h2"}
	_, err = h.Admit(other)
	require.NoError(t, err)
	_, err = h.Admit(other)
	require.ErrorIs(t, err, ErrTooManyWatchers, "the tenant's bound counts every key")
	_, err = h.Admit(Key{Tenant: "globex", Scope: "chat", KeyHash: "h1"})
	require.NoError(t, err, "another tenant is not affected")

	a.Release()
	a.Release() // idempotent
	require.Equal(t, 1, h.Watchers(k))
	_, err = h.Admit(other)
	require.NoError(t, err)

	h.Open(k, r1)
	_, err = h.Attach(k, r1, 0)
	require.ErrorIs(t, err, ErrTooManyWatchers, "Attach is admitted like any watcher")
}

func TestManyReadersSeeTheSameSequence(t *testing.T) {
	t.Parallel()
	h := NewHub(Config{MaxBytes: 1 << 20, MaxPerKey: 64})
	l := h.Open(k, r1)
	const readers, events = 32, 200
	var wg sync.WaitGroup
	results := make([]string, readers)
	cursors := make([]*Cursor, readers)
	for i := range readers {
		c, err := h.Attach(k, r1, 0)
		require.NoError(t, err)
		cursors[i] = c
	}
	for i := range readers {
		wg.Go(func() {
			defer cursors[i].Close()
			var b strings.Builder
			for {
				e, err := cursors[i].Next(ctx(t))
				if err != nil {
					if !errors.Is(err, io.EOF) {
						b.WriteString("ERR " + err.Error())
					}
					break
				}
				b.Write(e.Data)
				b.WriteByte(',')
			}
			results[i] = b.String()
		})
	}
	var want strings.Builder
	for i := range events {
		d := fmt.Sprint(i)
		l.Append(Event{Data: []byte(d)})
		want.WriteString(d + ",")
	}
	l.Close(nil)
	wg.Wait()
	for i := range readers {
		require.Equal(t, want.String(), results[i], "reader %d", i)
	}
	require.Zero(t, h.Watchers(k))
}

// An Append that no reader waits for makes no channel: the owner's events
// cost a live stream no allocation of their own when nobody follows it.
// With a channel made at every Append, 1000 events cost over 1000
// allocations; the log's growing slice alone costs a few dozen.
func TestAppendWithoutWaitingReadersAllocatesNoChannel(t *testing.T) {
	h := NewHub(Config{MaxBytes: 1 << 20})
	l := h.Open(k, r1)
	e := Event{Data: []byte("x")}
	allocs := testing.AllocsPerRun(1, func() {
		for range 1000 {
			l.Append(e)
		}
	})
	require.Less(t, allocs, 100.0)
	l.Close(nil)
}

// Readers that wait between Appends are each woken, by the channel the
// first of them made.
func TestWaitingReadersAreWokenByEachAppend(t *testing.T) {
	t.Parallel()
	h := NewHub(Config{MaxBytes: 1 << 20})
	l := h.Open(k, r1)
	const readers, events = 3, 50
	var wg sync.WaitGroup
	got := make([][]string, readers)
	for i := range readers {
		c, err := h.Attach(k, r1, 0)
		require.NoError(t, err)
		wg.Go(func() {
			defer c.Close()
			for {
				e, err := c.Next(ctx(t))
				if err != nil {
					return
				}
				got[i] = append(got[i], string(e.Data))
			}
		})
	}
	want := make([]string, events)
	for n := range events {
		want[n] = fmt.Sprint(n)
		l.Append(Event{Data: []byte(want[n])})
	}
	l.Close(nil)
	wg.Wait()
	for i := range readers {
		require.Equal(t, want, got[i], "reader %d", i)
	}
}

// WireSize is AppendSSE's length for any data, line breaks of every kind
// included.
func FuzzWireSizeIsTheWireLength(f *testing.F) {
	for _, s := range []string{"", "a", "a\nb", "a\r\nb", "a\rb", "\r\r\n\n", "\r", "\n", "x\r\n\r\n", "\r\n\r"} {
		f.Add(s, "1-abcdef01-1", "")
	}
	f.Fuzz(func(t *testing.T, data, id, typ string) {
		e := Event{ID: id, Type: typ, Data: []byte(data)}
		if e.Valid() != nil {
			return
		}
		require.Equal(t, len(AppendSSE(nil, e)), WireSize(e), "data %q", data)
	})
}

// BenchmarkWireSize is the size of a typical chunk event.
func BenchmarkWireSize(b *testing.B) {
	e := Event{ID: "1-abcdef01-12", Data: []byte(`{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"` +
		strings.Repeat("token ", 30) + `"},"finish_reason":null}]}`)}
	for b.Loop() {
		_ = WireSize(e)
	}
}

// AppendSSE's lines are the data's lines, whatever its line breaks:
// ReadSSE gives the data back with \n line ends.
func FuzzAppendSSERoundTrip(f *testing.F) {
	for _, s := range []string{"", "a", "a\nb", "a\r\nb", "a\rb", "\r\r\n\n", "\r", "\n", "x\r\n\r\n", "\r\n\r"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data string) {
		e, err := ReadSSE(bufio.NewReader(bytes.NewReader(AppendSSE(nil, Event{Data: []byte(data)}))))
		require.NoError(t, err)
		want := strings.ReplaceAll(strings.ReplaceAll(data, "\r\n", "\n"), "\r", "\n")
		require.Equal(t, want, string(e.Data), "data %q", data)
	})
}

// BenchmarkAppendSSE is a typical chunk event rendered.
func BenchmarkAppendSSE(b *testing.B) {
	e := Event{ID: "1-abcdef01-12", Data: []byte(`{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"` +
		strings.Repeat("token ", 30) + `"},"finish_reason":null}]}`)}
	buf := make([]byte, 0, 512)
	for b.Loop() {
		buf = AppendSSE(buf[:0], e)
	}
}
