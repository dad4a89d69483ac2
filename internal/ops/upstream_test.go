package ops

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"reflect"
	"testing"
	"testing/iotest"
)

// TestReadLimitedIsReadAllOfLimitReader: the same bytes and error as
// io.ReadAll(io.LimitReader(r, limit)), whatever the declared length and
// however the reader hands its bytes out.
func TestReadLimitedIsReadAllOfLimitReader(t *testing.T) {
	boom := errors.New("boom")
	for _, size := range []int{0, 1, 250, 511, 512, 513, 5000} {
		body := bytes.Repeat([]byte("abcdefghij"), size/10+1)[:size]
		for _, limit := range []int64{1, 250, 513, int64(size), int64(size) + 1, 1 << 20} {
			for _, declared := range []int64{-1, 0, 1, int64(size), int64(size) + 7, 1 << 30} {
				for name, wrap := range map[string]func(io.Reader) io.Reader{
					"plain": func(r io.Reader) io.Reader { return r }, "one byte": iotest.OneByteReader,
					"data with EOF": iotest.DataErrReader,
					"error":         func(r io.Reader) io.Reader { return io.MultiReader(r, iotest.ErrReader(boom)) },
				} {
					want, wantErr := io.ReadAll(io.LimitReader(wrap(bytes.NewReader(body)), limit))
					got, gotErr := readLimited(wrap(bytes.NewReader(body)), declared, limit)
					if !bytes.Equal(got, want) || !errors.Is(gotErr, wantErr) && gotErr != wantErr {
						t.Fatalf("size %d, limit %d, declared %d, %s: %d bytes, %v; io.ReadAll: %d bytes, %v",
							size, limit, declared, name, len(got), gotErr, len(want), wantErr)
					}
				}
			}
		}
	}
	src := make([]byte, 3000)
	r := bytes.NewReader(src)
	if n := testing.AllocsPerRun(50, func() { r.Reset(src); _, _ = readLimited(r, int64(len(src)), 1<<20) }); n != 1 {
		t.Errorf("%v allocations for a body of its declared length, want 1", n)
	}
}

// TestCheckChatInputAllocatesNothingForValidInput: a valid input asking
// for its own max_tokens costs no allocation (the cap is not copied to the
// heap unless it is used).
func TestCheckChatInputAllocatesNothingForValidInput(t *testing.T) {
	mt := 16
	in := ChatInput{Messages: []ChatMessage{{Role: "user", Content: "hi"}}, MaxTokens: &mt}
	if n := testing.AllocsPerRun(100, func() {
		if err := checkChatInput(&in, 64); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("%v allocations", n)
	}
}

// TestUpstreamRequestHeaders: the content type and accept headers, and the
// configured ones after them (which may replace them).
func TestUpstreamRequestHeaders(t *testing.T) {
	req, err := upstreamRequest(t.Context(), "u", "http://127.0.0.1/x", "text/event-stream", fixedHeaders(map[string]string{"authorization": "Bearer k"}), []byte("{}"))
	if err != nil {
		t.Fatal(err)
	}
	want := http.Header{"Content-Type": {"application/json"}, "Accept": {"text/event-stream"}, "Authorization": {"Bearer k"}}
	if !reflect.DeepEqual(req.Header, want) {
		t.Fatalf("headers %v, want %v", req.Header, want)
	}
	req.Header.Add("Content-Type", "x")
	if got := req.Header.Values("Accept"); !reflect.DeepEqual(got, []string{"text/event-stream"}) {
		t.Fatalf("an Add to one header changed another: Accept %v", got)
	}
	req, _ = upstreamRequest(t.Context(), "u", "http://127.0.0.1/x", "application/json", fixedHeaders(map[string]string{"Accept": "*/*"}), nil)
	if got := req.Header.Values("Accept"); !reflect.DeepEqual(got, []string{"*/*"}) {
		t.Fatalf("a configured Accept is not the one sent: %v", got)
	}
	// The values shared between requests: what one request's header does
	// (Add, Set, Del) is not in the next one's.
	fixed := fixedHeaders(map[string]string{"authorization": "Bearer k"})
	for _, accept := range []string{"application/json", "text/event-stream", "application/x-ndjson"} {
		req, _ = upstreamRequest(t.Context(), "u", "http://127.0.0.1/x", accept, fixed, nil)
		req.Header.Add("Content-Type", "x")
		req.Header.Add("Accept", "y")
		req.Header.Add("Authorization", "z")
		req, _ = upstreamRequest(t.Context(), "u", "http://127.0.0.1/x", accept, fixed, nil)
		want := http.Header{"Content-Type": {"application/json"}, "Accept": {accept}, "Authorization": {"Bearer k"}}
		if !reflect.DeepEqual(req.Header, want) {
			t.Fatalf("accept %s: headers %v, want %v", accept, req.Header, want)
		}
		req.Header.Set("Content-Type", "z")
		req.Header.Set("Authorization", "z")
		req.Header.Del("Accept")
	}
	if n := testing.AllocsPerRun(100, func() { _ = headerValue("text/event-stream") }); n != 0 {
		t.Errorf("a constant accept allocates: %v", n)
	}
}
