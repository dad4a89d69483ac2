package ops

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/idemguard/idemguard/internal/keys"
	"github.com/idemguard/idemguard/sanitize"
)

// DefaultDemoDelay is the demo operation's latency unless configured.
const DefaultDemoDelay = 3 * time.Second

// Demo returns an operation that stands in for a slow model call, for
// development without network or credentials: it waits delay (or until ctx
// ends, whose error it then returns for the guard to classify) and answers
//
//	{"ok":true,"stopReason":"completed","data":{"text":"Demo answer 1a2b3c4d: …",
//	 "prompt_tokens":N,"completion_tokens":M,"total_tokens":N+M}}
//
// derived deterministically from the canonical inputs: the same inputs give
// the same answer, whatever their key order or white space. The inputs' text
// is never echoed.
func Demo(delay time.Duration) Func {
	return func(ctx context.Context, inputs json.RawMessage) (any, error) {
		canonical, err := keys.Canonicalize(inputs)
		if err != nil {
			return nil, invalidInput("demo: inputs are not JSON")
		}
		if delay > 0 {
			t := time.NewTimer(delay)
			defer t.Stop()
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("demo: %w", context.Cause(ctx))
			case <-t.C:
			}
		}
		sum := sha256.Sum256(canonical)
		prompt := int64(len(canonical)/4 + 1)
		completion := int64(16 + binary.BigEndian.Uint16(sum[4:6])%48)
		return map[string]any{
			"ok":         true,
			"stopReason": sanitize.Completed,
			"data": map[string]any{
				"text": fmt.Sprintf("Demo answer %s: this stands in for an expensive model call; "+
					"the same inputs always get this same answer.", hex.EncodeToString(sum[:4])),
				"finish_reason":     "stop",
				"prompt_tokens":     prompt,
				"completion_tokens": completion,
				"total_tokens":      prompt + completion,
			},
		}, nil
	}
}
