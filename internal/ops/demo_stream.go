package ops

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/sanitize"
)

// DemoStream is the streamed form of Demo: the same answer, emitted word by
// word as chat.completion.chunk events spread over delay, so a page can show
// a streamed answer (and a reload in its middle) without a model.
func DemoStream(delay time.Duration) StreamFunc {
	whole := Demo(0)
	return func(ctx context.Context, inputs json.RawMessage, emit func(idemguard.Chunk)) (any, error) {
		v, err := whole(ctx, inputs)
		if err != nil {
			return nil, err
		}
		data := v.(map[string]any)["data"].(map[string]any)
		words := strings.SplitAfter(data["text"].(string), " ")
		step := delay / time.Duration(len(words))
		for i, w := range words {
			if i > 0 && step > 0 {
				t := time.NewTimer(step)
				select {
				case <-ctx.Done():
					t.Stop()
					return nil, fmt.Errorf("demo: %w", context.Cause(ctx))
				case <-t.C:
				}
			}
			role := ""
			if i == 0 {
				role = "assistant"
			}
			emit(contentEvent(role, w))
		}
		emit(finishEvent("stop"))
		emit(usageEvent(chunkUsage{PromptTokens: data["prompt_tokens"].(int64),
			CompletionTokens: data["completion_tokens"].(int64), TotalTokens: data["total_tokens"].(int64)}))
		return sanitize.Envelope{OK: true, StopReason: sanitize.Completed, Data: data}, nil
	}
}
