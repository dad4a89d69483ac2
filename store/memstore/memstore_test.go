package memstore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemguard/idemguard/store/memstore"
	"github.com/idemguard/idemguard/store/storetest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Exercise(context.Background(), t, func(_ context.Context, t *testing.T) *storetest.Harness {
		s := memstore.New()
		return &storetest.Harness{
			Store: s,
			Age: func(t testing.TB, tenant, scope, keyHash string, d time.Duration) {
				if !s.Age(tenant, scope, keyHash, d) {
					t.Fatalf("Age: no row %s/%s/%s", tenant, scope, keyHash)
				}
			},
			Dump: func(testing.TB) string {
				var b strings.Builder
				for _, r := range s.Rows() {
					fmt.Fprintf(&b, "%s %s %s %d %s %s %d %s %s %d %s %s %s %s %s %s\n", r.Tenant, r.Scope, r.KeyHash,
						r.ID, r.Fingerprint, r.Status, r.Attempts, r.ClaimNonce, r.Response, r.ResponseCode,
						r.CreatedAt, r.StartedAt, r.HeartbeatAt, r.CompletedAt, r.ExpiresAt, r.Events)
				}
				return b.String()
			},
			Break: func(testing.TB) { _ = s.Close() },
		}
	})
}
