package routers

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/live"
	"github.com/idemguard/idemguard/routers/internal/pipeline"
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

// runAsync serves POST /v1/ops/:scope with Prefer: respond-async: the claim
// is made as without it; a won claim runs the operation in the background
// and answers 202 with the key record and its Location, as does a
// duplicate while it runs. A completed key answers as any replay. With
// Prefer: wait=N as well (RFC 7240), a key that completes within N seconds
// is answered with its outcome instead of 202.
func (h *handlers) runAsync(c *gin.Context, tenant tenancy.ID, scope *Scope, req pipeline.Request) {
	res, err := h.guard.Start(c.Request.Context(), req.Call(tenant, h.route(tenant, scope, req.Body, true), req.Body), scope.operation(req.Body))
	if !h.called(c, scope.Name, req, res, err) {
		return
	}
	if req.WaitApplied && res.Status == idemguard.StatusInProgress {
		if done, ok := h.awaitOutcome(c.Request.Context(), tenant, scope.Name, res, req.Wait); ok {
			done.Forced, done.Replaced = res.Forced, res.Replaced // a forced run's own outcome
			res = done
			logOutcome(c, res)
		}
	}
	if res.Status != idemguard.StatusInProgress {
		res.Header = nil // completed: answered as the synchronous path answers it
		h.answers.Result(c.Writer, req, res)
		return
	}
	ref := h.ref(c, scope.Name, req.ClientKey, res.KeyHash)
	c.Header(pipeline.HeaderPreferenceApplied, pipeline.PreferAsync)
	if res.Forced {
		c.Header(pipeline.HeaderReplacesAttempt, strconv.Itoa(res.Replaced))
	}
	rec := keyRecord{Ref: ref, Scope: scope.Name, Status: string(store.RowStarted), AttemptCount: res.Attempt}
	if key, err := h.guard.KeyOfHash(tenant, scope.Name, res.KeyHash); err == nil {
		rec = h.recordOf(c.Request.Context(), key, rec)
	}
	// A submission that did not win the claim joined the running job.
	existing := !res.Accepted
	rec.Existing = &existing
	if existing {
		c.Header(pipeline.HeaderExisting, "true")
	}
	logOf(c).stopReason = string(sanitize.InProgress)
	h.accepted(c, scope.Name, ref, rec)
}

// accepted answers 202 with the key record rec, its Location and the link
// to its events (Link rel="monitor" and eventsUrl), so that a client
// follows the job without building URLs.
func (h *handlers) accepted(c *gin.Context, scope, ref string, rec keyRecord) {
	loc := h.locationPrefix + keyPath(scope, ref)
	rec.EventsURL = loc + "/events"
	c.Header(pipeline.HeaderLocation, loc)
	c.Header(pipeline.HeaderLink, "<"+rec.EventsURL+`>; rel="monitor"`)
	c.Data(http.StatusAccepted, pipeline.ContentJSON, pipeline.EncodeJSON(rec))
}

// awaitOutcome follows the key of res for up to wait and returns its stored
// outcome as a Result, if it completed meanwhile. It never claims: a
// failure is answered as stored, not retried. For the request that started
// the key, the outcome is its own first answer (not marked cached).
func (h *handlers) awaitOutcome(ctx context.Context, tenant tenancy.ID, scope string, res idemguard.Result, wait time.Duration) (idemguard.Result, bool) {
	key, err := h.guard.KeyOfHash(tenant, scope, res.KeyHash)
	if err != nil {
		return idemguard.Result{}, false
	}
	e, ok := h.follow(ctx, key, wait, nil)
	if !ok {
		return idemguard.Result{}, false
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

// follow watches key for up to wait and returns its final event, if it
// came (ok false: the wait ended first, or the key cannot be watched).
// onProgress, if set, is told each progress event on the way.
func (h *handlers) follow(ctx context.Context, key idemguard.Key, wait time.Duration, onProgress func(store.Progress)) (idemguard.Event, bool) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	w, err := h.guard.Watch(ctx, key, "")
	if err != nil {
		return idemguard.Event{}, false
	}
	defer w.Close()
	for {
		e, err := w.Next(ctx)
		if err != nil {
			return idemguard.Event{}, false
		}
		if e.Final() {
			return e, true
		}
		if onProgress != nil && e.Kind == idemguard.EventProgress && e.Info != nil && e.Info.Progress != nil {
			onProgress(*e.Info.Progress)
		}
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
	rec.Progress = progressRecordOf(info.Progress)
	return rec, nil
}

// progressRecord is a key's progress as the API shows it: Done of Total
// (Total 0: not known), Fraction when Total is known, the stage (a name
// from the scope's allowlist) and when a heartbeat stored it.
type progressRecord struct {
	Done     int64    `json:"done"`
	Total    int64    `json:"total,omitempty"`
	Fraction *float64 `json:"fraction,omitempty"`
	Stage    string   `json:"stage,omitempty"`
	At       string   `json:"at"`
}

func progressRecordOf(pr *store.Progress) *progressRecord {
	if pr == nil {
		return nil
	}
	out := &progressRecord{Done: pr.Done, Total: pr.Total, Stage: pr.Stage, At: pipeline.FormatTime(pr.At)}
	if pr.Total > 0 {
		f := float64(pr.Done) / float64(pr.Total)
		out.Fraction = &f
	}
	return out
}

// recordOf is the key record of key as it stands, or else (the store did
// not answer) what the caller knows of it.
func (h *handlers) recordOf(ctx context.Context, key idemguard.Key, known keyRecord) keyRecord {
	if info, err := h.guard.Lookup(ctx, key); err == nil {
		if r, err := keyRecordOf(known.Ref, known.Scope, info); err == nil {
			return r
		}
	}
	return known
}

// staleAdvice is what a caller of a stale key can do.
const staleAdvice = "the process running this key stopped answering; send the same request with the same " +
	"Idempotency-Key again to run it (it is taken over, or marked abandoned where the scope never runs twice): " +
	"idemguard never stores the inputs, so it cannot re-run the key by itself"

// keyRoute reads what every key route starts with: the caller's tenant,
// the scope and the key of the :key reference (keyOfRef). It answers 401,
// 404 or 400 itself.
func (h *handlers) keyRoute(c *gin.Context, rotated bool) (scope *Scope, ref string, key idemguard.Key, ok bool) {
	tenant, scope, ok := h.tenantScope(c)
	if !ok {
		return nil, "", idemguard.Key{}, false
	}
	ref, key, ok = h.keyOfRef(c, tenant, scope.Name, rotated)
	return scope, ref, key, ok
}

// keyOfRef resolves the :key of a key route to the Key of its row
// (pipeline.ParseRef). With rotated, a client key whose row was made under
// a previous secret resolves to the hash it is stored under (History needs
// no such step: it finds a client key's events under every configured
// secret). It answers 400 itself.
func (h *handlers) keyOfRef(c *gin.Context, tenant tenancy.ID, scope string, rotated bool) (ref string, key idemguard.Key, ok bool) {
	ref = c.Param("key")
	key, err := h.resolveRef(c.Request.Context(), tenant, scope, principalFrom(c), ref, rotated)
	if err != nil {
		h.fail(c, err)
		return "", idemguard.Key{}, false
	}
	logOf(c).keyHash = shortHash(key.Hash())
	return ref, key, true
}

// resolveRef is keyOfRef for a caller of tenant in principal's key space,
// of every door.
func (h *handlers) resolveRef(ctx context.Context, tenant tenancy.ID, scope, principal, ref string, rotated bool) (idemguard.Key, error) {
	key, derived, err := pipeline.ParseRef(h.guard, tenant, scope, principal, ref)
	if err != nil {
		return idemguard.Key{}, err
	}
	if derived && principal != "" { // a principal's derived reference is masked (principalref.go)
		if key, err = h.guard.KeyOfHash(tenant, scope, h.maskHash(string(tenant), scope, principal, key.Hash())); err != nil {
			return idemguard.Key{}, err
		}
	}
	// Without a row the current hash stands, and the route's own read
	// answers.
	if rotated && !derived {
		if info, err := h.guard.Lookup(ctx, key); err == nil && info.KeyHash != key.Hash() {
			if stored, err := h.guard.KeyOfHash(tenant, scope, info.KeyHash); err == nil {
				key = stored
			}
		}
	}
	return key, nil
}

// cancelKey serves POST /v1/ops/:scope/keys/:key/cancel: 202 with the key
// record once the cancel is recorded on the row (the owner, in whatever
// process, stops at its next heartbeat); 409 for a finished key; 404 for
// an unknown key or another tenant's.
func (h *handlers) cancelKey(c *gin.Context) {
	scope, ref, key, ok := h.keyRoute(c, true)
	if !ok {
		return
	}
	if err := h.guard.Cancel(c.Request.Context(), key); err != nil {
		h.fail(c, err)
		return
	}
	rec := h.recordOf(c.Request.Context(), key, keyRecord{Ref: ref, Scope: scope.Name, Status: string(store.RowStarted), CancelRequested: true})
	h.accepted(c, scope.Name, ref, rec)
}

// keyEvent is the data of one event of GET …/keys/{key}/events.
type keyEvent struct {
	Event   string    `json:"event"`
	Attempt int       `json:"attempt"`
	At      string    `json:"at"`
	Record  keyRecord `json:"record"`
	// Progress is, on a progress event, the progress it reports (the
	// record's, at the same read).
	Progress *progressRecord `json:"progress,omitempty"`
}

// watchKey serves GET /v1/ops/:scope/keys/:key/events: a server-sent event
// stream of the key's transitions, ending with the stored answer (the
// record of the final event), then closed. Last-Event-ID resumes after an
// event; a stream with nothing left to say (the final event was seen)
// answers 204, which tells an EventSource to stop reconnecting.
func (h *handlers) watchKey(c *gin.Context) {
	scope, ref, key, ok := h.keyRoute(c, true)
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
	out := pipeline.NewSSE(c.Writer)
	for {
		wctx, cancel := context.WithTimeout(ctx, keepAliveEvery)
		e, err := w.Next(wctx)
		cancel()
		switch {
		case err == nil:
		case errors.Is(err, io.EOF), errors.Is(err, idemguard.ErrNotFound):
			if !out.Started {
				c.Status(http.StatusNoContent)
			}
			return
		case ctx.Err() != nil:
			return // the client left
		case errors.Is(err, context.DeadlineExceeded):
			if out.Comment("keep-alive") != nil {
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
		ev := keyEvent{Event: string(e.Kind), Attempt: e.Attempt, At: pipeline.FormatTime(e.At), Record: rec}
		if e.Kind == idemguard.EventProgress {
			ev.Progress = rec.Progress
		}
		data := pipeline.EncodeJSON(ev)
		if out.Send(live.Event{ID: string(e.ID), Type: string(e.Kind), Data: data}) != nil {
			return
		}
	}
}
