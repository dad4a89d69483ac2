package idemguard

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/idemguard/idemguard/sanitize"
)

// replay answers a succeeded row. readAt is the local time taken before the
// read, so the cache entry's lifetime (the row's remaining TTL on the
// database's clock) is counted from before the read, never after it.
func (g *Guard) replay(ctx context.Context, p prepared, rec Record, readAt time.Time) (Result, error) {
	env, err := decodeStored(rec)
	if err != nil {
		return Result{}, g.storeErr(ctx, p, "read", err)
	}
	env.Cached = true
	body, err := sanitize.Marshal(env)
	if err != nil {
		return Result{}, g.storeErr(ctx, p, "read", err)
	}
	res := Result{Status: StatusSucceeded, Envelope: env, Body: body, StatusCode: cmp.Or(rec.ResponseCode, http.StatusOK),
		Cached: true, StopReason: env.StopReason, Attempt: rec.Attempts, FirstSeen: rec.CreatedAt,
		CompletedAt: rec.CompletedAt, KeyHash: p.keyHash}
	if left := rec.ExpiresAt.Sub(rec.Now); left > 0 {
		g.cache.put(p.tenant, p.scope, p.keyHash, p.fingerprint, res, readAt.Add(min(left, g.cfg.ReplayCacheMaxAge)))
	}
	return res, nil
}

func (g *Guard) storedFailure(p prepared, rec Record, env sanitize.Envelope) Result {
	env.OK, env.Cached = false, true
	body, err := sanitize.Marshal(env)
	if err != nil {
		body = nil
	}
	return Result{Status: StatusFailed, Envelope: env, Body: body, StatusCode: cmp.Or(rec.ResponseCode, http.StatusBadGateway),
		Cached: true, StopReason: env.StopReason, Attempt: rec.Attempts, FirstSeen: rec.CreatedAt,
		CompletedAt: rec.CompletedAt, KeyHash: p.keyHash}
}

func (g *Guard) inProgress(p prepared, rec Record) Result {
	env := sanitize.Failure(sanitize.InProgress)
	body, _ := sanitize.Marshal(env)
	return Result{Status: StatusInProgress, Envelope: env, Body: body, StatusCode: http.StatusConflict,
		StopReason: sanitize.InProgress, Attempt: rec.Attempts, FirstSeen: rec.CreatedAt, KeyHash: p.keyHash}
}

// answerFromRow answers a call whose claim another caller took: in progress
// while that caller runs, else the stored answer. false when the row cannot
// be read or names other inputs.
func (g *Guard) answerFromRow(ctx context.Context, p prepared) (Result, bool) {
	readAt := g.now()
	rec, err := g.get(ctx, p)
	if err != nil || rec.Fingerprint != p.fingerprint {
		return Result{}, false
	}
	switch rec.Status {
	case RowStarted:
		g.emit(Event{Kind: EventInProgress, Scope: p.scope})
		return g.inProgress(p, rec), true
	case RowSucceeded:
		if res, err := g.replay(ctx, p, rec, readAt); err == nil {
			g.emit(Event{Kind: EventReplayed, Scope: p.scope})
			return res, true
		}
	case RowFailed:
		if env, err := decodeStored(rec); err == nil {
			return g.storedFailure(p, rec, env), true
		}
	}
	return Result{}, false
}

func decodeStored(rec Record) (sanitize.Envelope, error) {
	if len(rec.Response) == 0 {
		return sanitize.Envelope{}, fmt.Errorf("%s row %d has no stored response", rec.Status, rec.ID)
	}
	env, err := sanitize.FromJSON(rec.Response)
	if err != nil {
		return sanitize.Envelope{}, fmt.Errorf("stored response of row %d: %w", rec.ID, err)
	}
	return env, nil
}
