package idemguard

import (
	"cmp"
	"errors"
	"strconv"
	"strings"
)

// Resumable streams
//
// Every chunk a stream delivers carries an ID, "<attempt>-<n>": the
// execution it belongs to and its place in that execution's sequence (n
// from 1). The IDs are not stored: a replay numbers the stored sequence the
// same way, so the live chunks and every replay of them carry the same IDs.
//
// A call with Call.LastEventID resumes after that chunk when the chunks it
// delivers are that attempt's own sequence: the stored sequence (a replay),
// or the running execution's live log in this process (which it follows
// even without Call.Wait). In every other case it delivers the attempt's
// chunks from the first and says so in StreamStart.Restart: the ID names
// another attempt, or this call runs the operation itself
// (RestartSuperseded); the answer was stored without its chunks, which a
// replay rebuilds from the envelope, or holds fewer chunks than the ID
// names (RestartUnavailable). Never a gap, never a repeat, never two
// attempts in one stream.
//
// A stream that runs holds a live log of up to Config.MaxStreamBytes; a
// process runs at most Config.MaxLiveStreams at once. A call takes its
// place before it writes a claim (so a refused call leaves nothing behind)
// and gives it back when it ends, or as soon as it turns out to deliver
// another execution's chunks.

// chunkID is a parsed Chunk.ID; set false for none.
type chunkID struct {
	set          bool
	attempt, seq int
}

func formatChunkID(attempt, seq int) string {
	return strconv.Itoa(attempt) + "-" + strconv.Itoa(seq)
}

var errChunkID = errors.New(`a chunk ID is "<attempt>-<n>": two decimal numbers of at most 9 digits, the attempt from 1`)

// parseChunkID reads a chunk ID ("" is none).
func parseChunkID(s string) (chunkID, error) {
	if s == "" {
		return chunkID{}, nil
	}
	a, n, ok := strings.Cut(s, "-")
	attempt, seq := digits(a), digits(n)
	if !ok || attempt < 1 || seq < 0 {
		return chunkID{}, errChunkID
	}
	return chunkID{set: true, attempt: attempt, seq: seq}, nil
}

// digits reads 1 to 9 decimal digits; -1 for anything else.
func digits(s string) int {
	if len(s) == 0 || len(s) > 9 {
		return -1
	}
	n := 0
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return -1
		}
		n = n*10 + int(c-'0')
	}
	return n
}

// What a stream begins with, beside a count of stored events (begin's avail).
const (
	followed = -1 // a running execution's live log: its length is not known yet
	rebuilt  = -2 // events rebuilt from a stored envelope: not the attempt's own
)

// begin starts the caller's stream, once: it decides where the events
// resume (after the chunk Call.LastEventID names) or that they restart.
// avail is how many events the attempt delivered has (followed, rebuilt).
func (s *streamCall) begin(st StreamStart, avail int) {
	if s.begun {
		return
	}
	s.begun, s.attempt = true, st.Attempt
	if st.Origin != StreamLive {
		s.release() // another execution's events: this call runs nothing
	}
	if s.after.set {
		switch {
		case st.Origin == StreamLive || st.Attempt != s.after.attempt:
			st.Restart = RestartSuperseded
		case avail == rebuilt || avail >= 0 && s.after.seq > avail:
			st.Restart = RestartUnavailable
		default:
			s.sent = s.after.seq
		}
	}
	s.w.Begin(st)
}

// reserveBefore is the call's check before its first claim write: a place
// among the process's live streams, then Call.Check.
func (s *streamCall) reserveBefore(check func() error) func() error {
	return func() error {
		if !s.slot {
			max := int64(cmp.Or(s.g.cfg.MaxLiveStreams, DefaultMaxLiveStreams))
			if s.g.liveStreams.Add(1) > max {
				s.g.liveStreams.Add(-1)
				return ErrTooManyLiveStreams
			}
			s.slot = true
		}
		if check != nil {
			return check()
		}
		return nil
	}
}

// release gives the call's place among the live streams back.
func (s *streamCall) release() {
	if s.slot {
		s.slot = false
		s.g.liveStreams.Add(-1)
	}
}
