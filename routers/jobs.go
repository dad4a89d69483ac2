package routers

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/keys"
	"github.com/idemguard/idemguard/internal/live"
	"github.com/idemguard/idemguard/sanitize"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/tenancy"
)

// The routes of long-running keys, in gin syntax (after Options.Prefix).
const (
	routeKeyEvents = "/v1/ops/:scope/keys/:key/events"
	routeKeyCancel = "/v1/ops/:scope/keys/:key/cancel"
)

// Request headers of long-running keys.
const (
	headerLastEventID = "Last-Event-ID"
	preferAsync       = "respond-async"
)

// keepAliveEvery is how often an idle event stream gets a comment, so that
// proxies do not close it.
const keepAliveEvery = 15 * time.Second

// jobRoutes adds the routes of long-running keys to the authenticated API.
func (h *handlers) jobRoutes(api gin.IRouter) {
	api.GET(routeKeyEvents, h.watchKey)
	api.POST(routeKeyCancel, h.cancelKey)
	api.GET(routeKeyHistory, h.keyHistory) // history.go
}

// prefersAsync reports whether the request carries Prefer: respond-async
// (RFC 7240), among other preferences or not.
func prefersAsync(hd http.Header) bool {
	for _, header := range hd.Values(headerPrefer) {
		for _, pref := range splitOutsideQuotes(header, ',') {
			pref, _, _ = cutOutsideQuotes(pref, ';')
			if strings.EqualFold(strings.Trim(pref, " \t"), preferAsync) {
				return true
			}
		}
	}
	return false
}

// runAsync serves POST /v1/ops/:scope with Prefer: respond-async: the claim
// is made as without it; a won claim runs the operation in the background
// and answers 202 with the key record and its Location, as does a
// duplicate while it runs. A completed key answers as any replay. With
// Prefer: wait=N as well (RFC 7240), a key that completes within N seconds
// is answered with its outcome instead of 202.
func (h *handlers) runAsync(c *gin.Context, tenant tenancy.ID, scope *Scope, req guardedRequest) {
	run, body, clientKey := scope.Run, req.body, req.clientKey
	res, err := h.guard.Start(c.Request.Context(), idemguard.Call{
		Tenant:    tenant,
		Scope:     scope.Name,
		ClientKey: clientKey,
		Inputs:    body,
		Settings:  scope.Settings,
		Timeout:   scope.Timeout,
		Check:     inputCheck(scope, body),
	}, func(ctx context.Context) (any, error) { return run(ctx, body) })
	if err != nil {
		var ie *idemguard.InputError
		if clientKey != "" && !errors.As(err, &ie) { // inputs refused before the claim name no key
			h.setRef(c, scope.Name, clientKey)
		}
		h.fail(c, err)
		return
	}
	ref := clientKey
	if ref == "" {
		ref = derivedRefPrefix + res.KeyHash
	}
	h.setRef(c, scope.Name, ref)
	c.Set(keyHashKey, shortHash(res.KeyHash))
	if req.waitApplied && res.Status == idemguard.StatusInProgress {
		if done, ok := h.awaitOutcome(c.Request.Context(), tenant, scope.Name, res, req.wait); ok {
			res = done
		}
	}
	if res.Status == idemguard.StatusInProgress {
		c.Header(headerPreferenceApplied, preferAsync)
		rec := keyRecord{Ref: ref, Scope: scope.Name, Status: string(store.RowStarted), AttemptCount: res.Attempt}
		if key, err := h.guard.KeyOfHash(tenant, scope.Name, res.KeyHash); err == nil {
			if info, err := h.guard.Lookup(c.Request.Context(), key); err == nil {
				if r, err := keyRecordOf(ref, scope.Name, info); err == nil {
					rec = r
				}
			}
		}
		c.Set(stopReasonKey, string(sanitize.InProgress))
		c.Data(http.StatusAccepted, contentJSON, encodeJSON(rec))
		return
	}
	// Completed: answered as the synchronous path answers it.
	c.Set(stopReasonKey, string(res.StopReason))
	if res.Cached {
		c.Set(replayedKey, true)
	}
	res.Header = nil
	writeResult(c.Writer, req, res, h.retryAfter)
}

// awaitOutcome follows the key of res for up to wait and returns its stored
// outcome as a Result, if it completed meanwhile. It never claims: a
// failure is answered as stored, not retried. For the request that started
// the key, the outcome is its own first answer (not marked cached).
func (h *handlers) awaitOutcome(ctx context.Context, tenant tenancy.ID, scope string, res idemguard.Result, wait time.Duration) (idemguard.Result, bool) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	key, err := h.guard.KeyOfHash(tenant, scope, res.KeyHash)
	if err != nil {
		return idemguard.Result{}, false
	}
	w, err := h.guard.Watch(ctx, key, "")
	if err != nil {
		return idemguard.Result{}, false
	}
	defer w.Close()
	for {
		e, err := w.Next(ctx)
		if err != nil {
			return idemguard.Result{}, false
		}
		if !e.Final() {
			continue
		}
		out := idemguard.Result{Status: idemguard.StatusSucceeded, Body: e.Info.Document, StatusCode: e.Info.StatusCode,
			Cached: !res.Accepted, Attempt: e.Attempt, CompletedAt: e.Info.CompletedAt, KeyHash: res.KeyHash}
		if e.Info.Envelope != nil {
			env := *e.Info.Envelope
			env.Cached = out.Cached
			body, err := sanitize.Marshal(env)
			if err != nil {
				return idemguard.Result{}, false
			}
			out.Envelope, out.Body, out.StopReason = env, body, env.StopReason
		}
		if e.Kind != idemguard.EventSucceeded {
			out.Status = idemguard.StatusFailed
		}
		return out, true
	}
}

// keyRecordOf is the key record of info, as GET …/keys/{key} answers it.
func keyRecordOf(ref, scope string, info idemguard.KeyInfo) (keyRecord, error) {
	rec := keyRecord{
		Ref: ref, Scope: scope, Status: string(info.Status), AttemptCount: info.Attempts,
		CreatedAt: optTime(info.CreatedAt), StartedAt: optTime(info.StartedAt), HeartbeatAt: optTime(info.HeartbeatAt),
		CompletedAt: optTime(info.CompletedAt), ExpiresAt: optTime(info.ExpiresAt),
		Stale: info.Stale, CancelRequested: info.CancelRequested,
	}
	if info.Stale {
		rec.Next = staleAdvice
	}
	if info.Envelope != nil {
		body, err := sanitize.Marshal(*info.Envelope)
		if err != nil {
			return keyRecord{}, err
		}
		rec.Response, rec.ResponseCode = body, info.StatusCode
	} else if info.Document != nil {
		rec.Response, rec.ResponseCode = info.Document, info.StatusCode
	}
	rec.DroppedFields, rec.SecretID, rec.StreamEvents = info.DroppedFields, info.SecretID, info.StreamEvents
	return rec, nil
}

// staleAdvice is what a caller of a stale key can do.
const staleAdvice = "the process running this key stopped answering; send the same request with the same " +
	"Idempotency-Key again to run it (it is taken over, or marked abandoned where the scope never runs twice): " +
	"idemguard never stores the inputs, so it cannot re-run the key by itself"

// keyOfRef resolves the :key of a key route to the Key of its row: a
// client key, or "~" and the key hash of a derived key. It answers 400
// itself.
func (h *handlers) keyOfRef(c *gin.Context, tenant tenancy.ID, scope string) (ref string, key idemguard.Key, ok bool) {
	ref = c.Param("key")
	if hash, derived := strings.CutPrefix(ref, derivedRefPrefix); derived {
		key, err := h.guard.KeyOfHash(tenant, scope, hash)
		if err != nil || !isKeyHash(hash) {
			h.fail(c, reject(errInvalidRef, "a derived key reference is ~ followed by the 64 lower-case hex digits of the key hash"))
			return "", idemguard.Key{}, false
		}
		c.Set(keyHashKey, shortHash(hash))
		return ref, key, true
	}
	key, err := h.guard.Key(tenant, scope, ref) // validates the client key
	if err != nil {
		h.fail(c, reject(errInvalidRef, "a key reference is an Idempotency-Key (1 to %d characters of [A-Za-z0-9_.:-]) or ~ followed by a key hash", keys.MaxClientKeyLen))
		return "", idemguard.Key{}, false
	}
	// While the secret is rotated the key's row may have been made under a
	// previous secret: Lookup finds it under every configured one and names
	// the hash it is stored under. Without a row the current hash stands,
	// and the route's own read answers.
	if info, err := h.guard.Lookup(c.Request.Context(), key); err == nil && info.KeyHash != key.Hash() {
		if stored, err := h.guard.KeyOfHash(tenant, scope, info.KeyHash); err == nil {
			key = stored
		}
	}
	c.Set(keyHashKey, shortHash(key.Hash()))
	return ref, key, true
}

// cancelKey serves POST /v1/ops/:scope/keys/:key/cancel: 202 with the key
// record once the cancel is recorded on the row (the owner, in whatever
// process, stops at its next heartbeat); 409 for a finished key; 404 for
// an unknown key or another tenant's.
func (h *handlers) cancelKey(c *gin.Context) {
	tenant, scope, ok := h.tenantScope(c)
	if !ok {
		return
	}
	ref, key, ok := h.keyOfRef(c, tenant, scope.Name)
	if !ok {
		return
	}
	if err := h.guard.Cancel(c.Request.Context(), key); err != nil {
		h.fail(c, err)
		return
	}
	rec := keyRecord{Ref: ref, Scope: scope.Name, Status: string(store.RowStarted), CancelRequested: true}
	if info, err := h.guard.Lookup(c.Request.Context(), key); err == nil {
		if r, err := keyRecordOf(ref, scope.Name, info); err == nil {
			rec = r
		}
	}
	c.Header(headerLocation, h.locationPrefix+keyPath(scope.Name, ref))
	c.Data(http.StatusAccepted, contentJSON, encodeJSON(rec))
}

// keyEvent is the data of one event of GET …/keys/{key}/events.
type keyEvent struct {
	Event   string    `json:"event"`
	Attempt int       `json:"attempt"`
	At      string    `json:"at"`
	Record  keyRecord `json:"record"`
}

// watchKey serves GET /v1/ops/:scope/keys/:key/events: a server-sent event
// stream of the key's transitions, ending with the stored answer (the
// record of the final event), then closed. Last-Event-ID resumes after an
// event; a stream with nothing left to say (the final event was seen)
// answers 204, which tells an EventSource to stop reconnecting.
func (h *handlers) watchKey(c *gin.Context) {
	tenant, scope, ok := h.tenantScope(c)
	if !ok {
		return
	}
	ref, key, ok := h.keyOfRef(c, tenant, scope.Name)
	if !ok {
		return
	}
	ctx := c.Request.Context()
	w, err := h.guard.Watch(ctx, key, idemguard.EventID(c.GetHeader(headerLastEventID)))
	if err != nil {
		h.fail(c, err)
		return
	}
	defer w.Close()
	out := newSSEWriter(c.Writer)
	for {
		wctx, cancel := context.WithTimeout(ctx, keepAliveEvery)
		e, err := w.Next(wctx)
		cancel()
		switch {
		case err == nil:
		case errors.Is(err, io.EOF), errors.Is(err, idemguard.ErrNotFound):
			if !out.started {
				c.Status(http.StatusNoContent)
			}
			return
		case ctx.Err() != nil:
			return // the client left
		case errors.Is(err, context.DeadlineExceeded):
			if out.comment("keep-alive") != nil {
				return
			}
			continue
		default:
			return
		}
		rec, err := keyRecordOf(ref, scope.Name, *e.Info)
		if err != nil {
			return
		}
		data := encodeJSON(keyEvent{Event: string(e.Kind), Attempt: e.Attempt, At: formatTime(e.At), Record: rec})
		if out.send(live.Event{ID: string(e.ID), Type: string(e.Kind), Data: data}) != nil {
			return
		}
	}
}
