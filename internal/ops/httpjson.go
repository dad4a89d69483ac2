package ops

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/caller"
	"github.com/idemguard/idemguard/sanitize"
)

// HTTPJSONConfig configures HTTPJSON.
type HTTPJSONConfig struct {
	// URL receives a POST of the request's inputs.
	URL string
	// Headers are set on every request (e.g. an Authorization). Never logged.
	Headers map[string]string
	// Timeout bounds one call (0: only the guard's timeout applies).
	Timeout time.Duration
	// Client sends the requests. Defaults to one client, shared by every
	// operation, on a NewTransport and without a timeout of its own.
	Client *http.Client
	// Pseudonym makes the Idemguard-Actor header from the caller the
	// context names (Guard.HashActor); nil: no actor header.
	Pseudonym caller.Pseudonym
}

// HTTPJSON returns the operation of an http_json scope: it POSTs the inputs
// unchanged to URL, with the configured headers and, set after them so
// that they always say who asked, the caller's tenant (Idemguard-Tenant)
// and pseudonymous actor (Idemguard-Actor, made with cfg.Pseudonym) when the
// context names them (caller.Headers): the upstream can authorise per
// tenant, and learns no credential and no user's identity. A 2xx answer must be a JSON object. An object with an
// "ok" field is taken as an envelope (ok, stopReason, data, traceId, ...);
// any other object becomes the envelope's data: {"ok":true,"data":answer}.
// The guard sanitizes either before storing it (nested objects and blocked
// keys such as model or prompt are dropped). Failures map like OpenAIChat's:
// 429 rate_limited, 5xx and transport errors provider_error, no answer in
// time timeout, other 4xx invalid_input, a non-object answer provider_error.
func HTTPJSON(cfg HTTPJSONConfig) Func {
	client := cmp.Or(cfg.Client, defaultClient())
	headers := fixedHeaders(cfg.Headers)
	return func(ctx context.Context, inputs json.RawMessage) (any, error) {
		ours := caller.Headers(ctx, cfg.Pseudonym)
		h := make(http.Header, len(ours)+len(headers))
		for k, v := range ours {
			h[http.CanonicalHeaderKey(k)] = []string{v}
		}
		for k, v := range headers {
			if _, ours := h[k]; !ours {
				h[k] = v
			}
		}
		b, _, err := postJSON(ctx, client, "http_json upstream", cfg.URL, cfg.Timeout, h, inputs)
		if err != nil {
			return nil, err
		}
		var top map[string]json.RawMessage
		dec := json.NewDecoder(bytes.NewReader(b))
		if err := dec.Decode(&top); err != nil || top == nil || dec.More() {
			return nil, &idemguard.OpError{Reason: sanitize.ProviderError,
				Err: fmt.Errorf("http_json upstream: answer is not a JSON object")}
		}
		if _, isEnvelope := top["ok"]; isEnvelope {
			return json.RawMessage(b), nil
		}
		return map[string]any{"ok": true, "data": json.RawMessage(b)}, nil
	}
}
