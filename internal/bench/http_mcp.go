package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
)

// The MCP door in the http suite: serve-mcp-replay-store sends the replay
// keys of serve-replay-store as MCP tool calls (JSON-RPC tools/call on
// mcpPath, the stateless Streamable HTTP transport answering JSON) to the
// same serve process, so its paired ratio to serve-replay-store is the
// door's replay throughput relative to /v1/ops. The request is what an
// MCP client sends after initialize; a stateless server needs no session.

// mcpPath is where serve's configuration puts the door.
const mcpPath = "/mcp"

// mcpReplayed is how a replayed tool result is marked (its _meta).
var mcpReplayed = []byte(`"idemguard/replayed":true`)

// mcpReplay is the replay case of the MCP door on s, with baseline.
func (h *httpBench) mcpReplay(name, baseline string, s *proc) benchCase {
	var seq atomic.Int64
	return benchCase{name: name, baseline: baseline, cpu: cpuOf(s), op: func(ctx context.Context) error {
		n := seq.Add(1)
		k := n % replayKeys
		return h.mcpExpect(ctx, s.url+mcpPath, "replay-"+strconv.FormatInt(k, 10), "replay "+strconv.FormatInt(k, 10))
	}}
}

// mcpExpect calls the scope's tool with key and checks that the answer is
// a replay.
func (h *httpBench) mcpExpect(ctx context.Context, url, key, content string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(mcpCallBody(key, content)))
	if err != nil {
		return err
	}
	setMCPHeaders(req.Header, h.apiKey)
	resp, err := h.client.Do(req)
	if err != nil {
		return err
	}
	out, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	switch {
	case err != nil:
		return err
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("MCP %s key %s: status %d, want 200", url, key, resp.StatusCode)
	case !bytes.Contains(out, mcpReplayed):
		return fmt.Errorf("MCP %s key %s: not a replayed tool result: %.200s", url, key, out)
	}
	return nil
}

// mcpCallBody is the JSON-RPC tools/call of the bench scope's tool with key.
func mcpCallBody(key, content string) []byte {
	return []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"` + httpScope +
		`","arguments":{"messages":[{"role":"user","content":"` + content + `"}],"idempotencyKey":"` + key + `"}}}`)
}

// setMCPHeaders sets what an MCP client sends with a tool call.
func setMCPHeaders(h http.Header, apiKey string) {
	h.Set("Authorization", "Bearer "+apiKey)
	h.Set("Content-Type", "application/json")
	h.Set("Accept", "application/json, text/event-stream")
}
