package faulttest

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"
)

// Interval is one execution of an operation: from its first instruction to
// its return, on this process's monotonic clock.
type Interval struct {
	Start, End time.Time
	Finished   bool // ran to completion (not cut off by its context)
}

// Recorder is a fake upstream: operations made by Op record each
// execution's interval per key. It is safe for concurrent use.
type Recorder struct {
	mu   sync.Mutex
	runs map[string][]Interval
}

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder { return &Recorder{runs: map[string][]Interval{}} }

// Op returns an operation for key that takes d (or until its context
// ends) and answers {"ok":true,"data":{"key":key,"n":<execution number>}}.
func (r *Recorder) Op(key string, d time.Duration) func(ctx context.Context) (any, error) {
	return func(ctx context.Context) (any, error) {
		start := time.Now()
		r.mu.Lock()
		n := len(r.runs[key]) + 1
		r.runs[key] = append(r.runs[key], Interval{Start: start})
		i := len(r.runs[key]) - 1
		r.mu.Unlock()
		t := time.NewTimer(d)
		defer t.Stop()
		var err error
		select {
		case <-t.C:
		case <-ctx.Done():
			err = context.Cause(ctx)
		}
		r.mu.Lock()
		r.runs[key][i].End, r.runs[key][i].Finished = time.Now(), err == nil
		r.mu.Unlock()
		if err != nil {
			return nil, err
		}
		return map[string]any{"ok": true, "data": map[string]any{"key": key, "n": n}}, nil
	}
}

// Runs returns the executions of key.
func (r *Recorder) Runs(key string) []Interval {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Interval(nil), r.runs[key]...)
}

// Keys returns every key that ran at least once.
func (r *Recorder) Keys() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	keys := make([]string, 0, len(r.runs))
	for k := range r.runs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Overlaps describes every pair of executions of one key that overlapped in
// time (an execution still running counts as running until now); empty
// when none did.
func (r *Recorder) Overlaps() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for key, runs := range r.runs {
		for i := range runs {
			for j := i + 1; j < len(runs); j++ {
				a, b := runs[i], runs[j]
				aEnd, bEnd := a.End, b.End
				if aEnd.IsZero() {
					aEnd = time.Now()
				}
				if bEnd.IsZero() {
					bEnd = time.Now()
				}
				if a.Start.Before(bEnd) && b.Start.Before(aEnd) {
					out = append(out, fmt.Sprintf("key %s: run %d [%s] and run %d [%s] overlap by %s", key,
						i+1, aEnd.Sub(a.Start), j+1, bEnd.Sub(b.Start), minTime(aEnd, bEnd).Sub(maxTime(a.Start, b.Start))))
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
