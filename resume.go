package idemguard

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
)

// Resumable streams
//
// Every chunk a stream delivers carries an ID, "<attempt>-<execution>-<n>":
// the attempt it belongs to, a tag of that execution (eight hex digits of a
// hash of its claim nonce: an attempt given back by a cancel, or a key that
// expired and runs again, reuses an attempt number, never a tag), and its
// place in that execution's sequence (n from 1). The IDs are not stored: a
// replay numbers the stored sequence the same way, so the live chunks and
// every replay of them carry the same IDs.
//
// A call with Call.LastEventID resumes after that chunk when the chunks it
// delivers are that execution's own sequence: the stored sequence (a replay),
// or the running execution's live log in this process (which it follows
// even without Call.Wait). In every other case it delivers the attempt's
// chunks from the first and says so in StreamStart.Restart: the ID names
// another execution, or this call runs the operation itself
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
	tag          string
}

// names reports whether the ID is of the execution attempt with nonce.
func (c chunkID) names(attempt int, nonce string) bool {
	return c.set && c.attempt == attempt && c.tag == runTag(nonce)
}

// runTag names an execution by its claim nonce without revealing it.
func runTag(nonce string) string {
	var in [64]byte // a nonce's usual length fits: hashed without an allocation
	sum := sha256.Sum256(append(append(in[:0], "idemguard chunk id\x00"...), nonce...))
	var tag [8]byte
	hex.Encode(tag[:], sum[:4])
	return string(tag[:])
}

func formatChunkID(attempt int, tag string, seq int) string {
	return strconv.Itoa(attempt) + "-" + tag + "-" + strconv.Itoa(seq)
}

var errChunkID = errors.New(`a chunk ID is "<attempt>-<execution>-<n>": the attempt from 1 and n of at most 9 digits, the execution 8 lowercase hex digits`)

// parseChunkID reads a chunk ID ("" is none).
func parseChunkID(s string) (chunkID, error) {
	if s == "" {
		return chunkID{}, nil
	}
	parts := strings.Split(s, "-")
	if len(parts) != 3 || !isTag(parts[1]) {
		return chunkID{}, errChunkID
	}
	attempt, seq := digits(parts[0]), digits(parts[2])
	if attempt < 1 || seq < 0 {
		return chunkID{}, errChunkID
	}
	return chunkID{set: true, attempt: attempt, tag: parts[1], seq: seq}, nil
}

func isTag(s string) bool {
	if len(s) != 8 {
		return false
	}
	for _, c := range []byte(s) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
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
// nonce is the delivered execution's claim nonce, avail how many events it
// has (followed, rebuilt).
func (s *streamCall) begin(st StreamStart, nonce string, avail int) {
	if s.begun {
		return
	}
	s.begun, s.attempt, s.tag = true, st.Attempt, runTag(nonce)
	if st.Origin != StreamLive {
		s.release() // another execution's events: this call runs nothing
	}
	if s.after.set {
		switch {
		case st.Origin == StreamLive || !s.after.names(st.Attempt, nonce):
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
