package stats

import (
	"context"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/idemguard/idemguard/internal/mysqlstore"
)

// SecretRows is how many live rows of idempotency_keys one secret id still
// holds. A secret rotated out of IDEMPOTENCY_SECRET may be dropped from
// IDEMPOTENCY_PREVIOUS_SECRETS once its id holds none.
type SecretRows struct {
	// SecretID is the id ("" for the unnamed secret: secret_id NULL).
	SecretID string `json:"secret_id"`
	// Live counts the rows that still answer for their key: not expired, or
	// started (a started row past its expiry counts while its owner may
	// still hold its lease).
	Live int64 `json:"live_rows"`
	// Started counts the live rows still running (status started).
	Started int64 `json:"started_rows"`
	// LastExpires is the latest expires_at among them: the earliest time
	// the id may hold no live row, if no new row is made under it.
	LastExpires time.Time `json:"last_expires_at"`
}

// CollectSecretRows returns the live rows per secret id, ordered by id (the
// unnamed secret first), and the database clock they were counted at. It
// reads the index idx_idempotency_secret alone (mysqlstore.SecretRowCounts).
func CollectSecretRows(ctx context.Context, db *sqlx.DB) ([]SecretRows, time.Time, error) {
	now, err := mysqlstore.DBNow(ctx, db)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("stats: read the database clock: %w", err)
	}
	rows, err := mysqlstore.SecretRowCounts(ctx, db)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("stats: count rows per secret id: %w", err)
	}
	out := make([]SecretRows, len(rows))
	for i, r := range rows {
		out[i] = SecretRows{SecretID: r.SecretID, Live: r.Live, Started: r.Started, LastExpires: r.LastExpires}
	}
	return out, now, nil
}
