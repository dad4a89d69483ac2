package ops

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/idemguard/idemguard/internal/config"
	"github.com/idemguard/idemguard/internal/keys"
	"github.com/idemguard/idemguard/progress"
	"github.com/idemguard/idemguard/sanitize"
)

// DefaultDemoDelay is the demo operation's latency unless configured.
const DefaultDemoDelay = 3 * time.Second

// DemoSteps is how many steps the demo operation reports its progress in,
// and DemoStages the stage names it reports (a demo scope's allowlist).
const DemoSteps = 10

var DemoStages = config.DemoProgressStages

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
		if err := demoWait(ctx, delay); err != nil {
			return nil, err
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

// demoWait waits delay in DemoSteps steps, reporting each (package
// progress): the first half "thinking", the second "writing". It returns
// ctx's cause if ctx ends first.
func demoWait(ctx context.Context, delay time.Duration) error {
	if delay <= 0 {
		return nil
	}
	t := time.NewTimer(delay / DemoSteps)
	defer t.Stop()
	for i := int64(1); i <= DemoSteps; i++ {
		select {
		case <-ctx.Done():
			return fmt.Errorf("demo: %w", context.Cause(ctx))
		case <-t.C:
		}
		progress.Report(ctx, progress.Update{Done: i, Total: DemoSteps, Stage: DemoStages[min(1, (i-1)*2/DemoSteps)]})
		t.Reset(delay / DemoSteps)
	}
	return nil
}
