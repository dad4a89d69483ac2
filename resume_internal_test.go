package idemguard

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// An execution's tag, in every chunk ID, is the first four bytes of the
// SHA-256 of "idemguard chunk id\x00" and its nonce, in hex, whatever the
// nonce's length: the IDs of a stream and of its replays do not change.
// It costs one allocation, the tag itself.
func TestRunTagIsTheNoncesHash(t *testing.T) {
	for _, nonce := range []string{"", "n1", strings.Repeat("a", 45), strings.Repeat("b", 46), strings.Repeat("c", 300)} {
		sum := sha256.Sum256([]byte("idemguard chunk id\x00" + nonce))
		require.Equal(t, hex.EncodeToString(sum[:4]), runTag(nonce), "nonce of %d bytes", len(nonce))
	}
	require.LessOrEqual(t, testing.AllocsPerRun(10, func() { _ = runTag("0123456789abcdef0123456789abcdef") }), 1.0)
}
