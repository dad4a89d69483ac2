package routers

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The delivery members leave the body before the key and fingerprint are
// derived: a plain and a streamed request of one key are one operation.
// Keeping "stream" in the body makes the first two rows fail.
func TestDeliveryModeIsNotIdentity(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, body, want string
		stream           bool
	}{
		{"stream true", `{"messages":[1],"stream":true,"stream_options":{"include_usage":true}}`, `{"messages":[1]}`, true},
		{"stream false", `{"stream":false,"messages":[1]}`, `{"messages":[1]}`, false},
		{"no stream", `{"messages":[1],"x":"<a>"}`, `{"messages":[1],"x":"<a>"}`, false},
		{"numbers kept as written", `{"t":1.50,"stream":true}`, `{"t":1.50}`, true},
		{"not an object", `["stream"]`, `["stream"]`, false},
		{"repeated member left to the operation", `{"stream":true,"stream":false}`, `{"stream":true,"stream":false}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, stream, err := deliveryMode([]byte(tc.body))
			require.NoError(t, err)
			require.Equal(t, tc.want, string(got))
			require.Equal(t, tc.stream, stream)
		})
	}
	_, _, err := deliveryMode([]byte(`{"stream":"yes"}`))
	require.ErrorIs(t, err, errInvalidBody)
}
