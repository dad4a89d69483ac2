package routers

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/idemguard/idemguard"
)

// The REST API and the middleware are two doors to one request path: both
// read a request with readGuarded before the guard runs, and answer its
// Result with writeResult, so a client cannot tell them apart by how they
// refuse, replay or wait.

// guardedRequest is what is read from a request before the guard runs.
type guardedRequest struct {
	clientKey string
	raw       []byte          // the body as sent
	body      json.RawMessage // the body as JSON inputs ({} for an empty one)
	wait      time.Duration   // Prefer: wait, capped
	// waitApplied: the request asked for a wait, and the answer says so.
	waitApplied bool
}

// readGuarded reads the Idempotency-Key (required when keyRequired), the JSON
// body (at most maxBody bytes) and Prefer: wait (capped at maxWait), in that
// order: a request refused here never reaches the guard, so it stores no row
// and burns no key.
func readGuarded(w http.ResponseWriter, r *http.Request, scope string, keyRequired bool, maxBody int64, maxWait time.Duration) (guardedRequest, error) {
	key, err := parseIdempotencyKey(r.Header)
	if err != nil {
		return guardedRequest{}, err
	}
	if key == "" && keyRequired {
		return guardedRequest{}, reject(errMissingKey, "scope %q requires an Idempotency-Key header", scope)
	}
	raw, body, err := readJSONBody(w, r, maxBody)
	if err != nil {
		return guardedRequest{}, err
	}
	wait, applied := parsePreferWait(r.Header, maxWait)
	return guardedRequest{clientKey: key, raw: raw, body: body, wait: wait, waitApplied: applied}, nil
}

// writeResult answers res: the stored answer with its status and stored
// headers (a replay marked Idempotent-Replayed, with the original completion
// time), 409 with Retry-After while another caller runs it, and a problem for
// a failure. The first caller and every replay get the same status, headers
// and body.
func writeResult(w http.ResponseWriter, req guardedRequest, res idemguard.Result, retryAfter string) {
	h := w.Header()
	if req.waitApplied {
		h.Set(headerPreferenceApplied, preferenceApplied(req.wait))
	}
	if res.Cached {
		h.Set(headerReplayed, "true")
		if !res.CompletedAt.IsZero() {
			h.Set(headerCompletedAt, formatTime(res.CompletedAt))
		}
	}
	switch res.Status {
	case idemguard.StatusSucceeded:
		for k, v := range res.Header {
			h[k] = v
		}
		if h.Get("Content-Type") == "" {
			h.Set("Content-Type", contentJSON)
		}
		if res.StatusCode == http.StatusNoContent || res.StatusCode == http.StatusNotModified {
			w.WriteHeader(res.StatusCode)
			return
		}
		h.Set("Content-Length", strconv.Itoa(len(res.Body)))
		w.WriteHeader(res.StatusCode)
		_, _ = w.Write(res.Body)
	case idemguard.StatusInProgress:
		h.Set(headerRetryAfter, retryAfter)
		writeProblemHTTP(w, resultProblem(res))
	default:
		writeProblemHTTP(w, resultProblem(res))
	}
}
