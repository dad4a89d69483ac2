package idemguard

import (
	"errors"

	"github.com/idemguard/idemguard/internal/engine"
)

// The conversions between the public types and the engine's, in one place.
// Sentinel errors need none: both packages name the same values.

func engineSettings(s Settings) engine.Settings {
	return engine.Settings{TTL: s.TTL, StaleAfter: s.StaleAfter, MaxAttempts: s.MaxAttempts,
		StalePolicy: engine.StalePolicy(s.StalePolicy)}
}

func publicResult(r engine.Result) Result {
	return Result{Status: Status(r.Status), Envelope: r.Envelope, Body: r.Body, StatusCode: r.StatusCode,
		Cached: r.Cached, StopReason: r.StopReason, Attempt: r.Attempt, FirstSeen: r.FirstSeen,
		CompletedAt: r.CompletedAt, KeyHash: r.KeyHash, Err: publicError(r.Err), LostClaim: r.LostClaim}
}

func publicKeyInfo(k engine.KeyInfo) KeyInfo {
	return KeyInfo{KeyHash: k.KeyHash, Status: KeyStatus(k.Status), Attempts: k.Attempts, CreatedAt: k.CreatedAt,
		StartedAt: k.StartedAt, HeartbeatAt: k.HeartbeatAt, CompletedAt: k.CompletedAt, ExpiresAt: k.ExpiresAt,
		Envelope: k.Envelope, StatusCode: k.StatusCode}
}

func publicEvent(e engine.Event) Event {
	return Event{Kind: EventKind(e.Kind), Scope: e.Scope, Duration: e.Duration, StopReason: e.Reason,
		Failed: e.Failed, StoreOp: e.StoreOp, FromMemory: e.FromMemory, Field: e.Field}
}

// publicError turns the engine's error types into this package's; anything
// else (sentinels, wrapped sentinels, an operation's own errors) passes as is.
func publicError(err error) error {
	if err == nil {
		return nil
	}
	var se *engine.StoreError
	if errors.As(err, &se) && err == error(se) {
		return &StoreError{Op: se.Op, Err: se.Err}
	}
	var pe *engine.PanicError
	if errors.As(err, &pe) && err == error(pe) {
		return &PanicError{Value: pe.Value, Stack: pe.Stack}
	}
	return err
}
