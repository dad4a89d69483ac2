package sanitize_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/sanitize"
)

func TestAllowlistKeepsNamedPathsAndReportsTheRest(t *testing.T) {
	t.Parallel()
	a, err := sanitize.NewAllowlist([]string{"id", "name", "tags", "owner.name", "items[].id", "deep"})
	require.NoError(t, err)
	in := json.RawMessage(`{
		"id": "w-1", "name": "widget", "tags": ["a", {"b": 1, "Stack": "x"}], "secret": "s3",
		"owner": {"name": "ann", "email": "a@x"},
		"items": [{"id": 1.50, "token": "t"}, {"id": 2}],
		"deep": {"a": {"b": {"c": {"debug": "d", "keep": 1e3}}}},
		"error": "item is required"
	}`)
	var dropped []string
	b, err := a.Document(in, func(p string) { dropped = append(dropped, p) })
	require.NoError(t, err)
	require.Equal(t,
		`{"deep":{"a":{"b":{"c":{"keep":1e3}}}},"id":"w-1","items":[{"id":1.50},{"id":2}],"name":"widget","owner":{"name":"ann"},"tags":["a",{"b":1}]}`,
		string(b), "sorted keys, numbers as written, blocked keys gone at any depth")
	require.ElementsMatch(t, []string{"tags[].Stack", "secret", "owner.email", "items[].token", "deep.a.b.c.debug", "error"}, dropped)

	again, err := a.Document(in, nil)
	require.NoError(t, err)
	require.Equal(t, b, again, "the same value encodes to the same bytes")
}

func TestAllowlistValueOfTheWrongShapeIsDropped(t *testing.T) {
	t.Parallel()
	a, err := sanitize.NewAllowlist([]string{"owner.name", "items[].id"})
	require.NoError(t, err)
	var dropped []string
	b, err := a.Document(map[string]any{"owner": "ann", "items": map[string]any{"id": 1}}, func(p string) { dropped = append(dropped, p) })
	require.NoError(t, err)
	require.Equal(t, `{}`, string(b))
	require.ElementsMatch(t, []string{"owner", "items"}, dropped)
}

func TestAllowlistRejectsBadPaths(t *testing.T) {
	t.Parallel()
	for _, paths := range [][]string{nil, {""}, {"a..b"}, {"a[]b"}, {"prompt"}, {"data.Debug"}, {"x.secret"}} {
		_, err := sanitize.NewAllowlist(paths, "secret")
		require.ErrorIs(t, err, sanitize.ErrInvalidPath, "%q", paths)
	}
}

func TestKeepAllButKeepsEverythingButTheBlockedKeys(t *testing.T) {
	t.Parallel()
	var dropped []string
	b, err := sanitize.KeepAllBut("token").Document(json.RawMessage(`{"a":{"Token":"t","prompt":"p","b":[1,{"model":"m"}]},"c":null}`),
		func(p string) { dropped = append(dropped, p) })
	require.NoError(t, err)
	require.Equal(t, `{"a":{"b":[1,{}]},"c":null}`, string(b))
	require.ElementsMatch(t, []string{"a.Token", "a.prompt", "a.b[].model"}, dropped)
}

func TestAllowlistNeedsAnObject(t *testing.T) {
	t.Parallel()
	a := sanitize.KeepAllBut()
	_, err := a.Document(json.RawMessage(`[1,2]`), nil)
	require.ErrorIs(t, err, sanitize.ErrNotObject)
}
