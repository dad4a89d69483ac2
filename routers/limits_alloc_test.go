package routers

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The limits cost a request no allocation once its tenant's entry exists:
// the rate and the admission of a replay (which never calls Admit).
func TestLimitsAllocateNothingPerRequest(t *testing.T) {
	l := newLimiter(Limits{})
	_, _ = l.allow("acme", "chat")
	allocs := testing.AllocsPerRun(1000, func() {
		e, err := l.allow("acme", "chat")
		if err != nil || e.admission(false) == nil {
			t.Error("refused")
		}
	})
	require.Zero(t, allocs)
}
