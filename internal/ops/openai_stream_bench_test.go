package ops

import (
	"strings"
	"testing"

	"github.com/idemguard/idemguard"
)

// BenchmarkStreamFirstChunk is what a stream costs from the upstream's first
// chunk to its first event: the reader set up, the line read, the chunk
// decoded and the event built (time to first event; go test -bench).
func BenchmarkStreamFirstChunk(b *testing.B) {
	src := "data: {\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\"model\":\"bench-model\"," +
		"\"choices\":[{\"index\":0,\"delta\":{\"content\":\"token0 \"},\"finish_reason\":null}]}\n\n"
	b.ReportAllocs()
	for b.Loop() {
		a := assembler{emit: func(idemguard.Chunk) {}}
		_ = a.read(strings.NewReader(src))
	}
}
