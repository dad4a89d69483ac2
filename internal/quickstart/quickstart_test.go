package quickstart

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBlock(t *testing.T) {
	t.Parallel()
	got, err := Block("intro\n<!-- quickstart:begin -->\n```sh\nmake run\ncurl x\n```\n<!-- quickstart:end -->\nmore")
	require.NoError(t, err)
	require.Equal(t, "make run\ncurl x\n", got)
	_, err = Block("no markers")
	require.ErrorContains(t, err, "no <!-- quickstart:begin -->")
	_, err = Block("<!-- quickstart:begin -->\n```sh\nmake run\n")
	require.ErrorContains(t, err, "without quickstart:end")

	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	got, err = Block(string(readme))
	require.NoError(t, err)
	require.NotEmpty(t, got, "the README has its quick start")
}
