package main

import (
	"context"
	"log/slog"
	"slices"

	"github.com/idemguard/idemguard/internal/stats"
)

// checkSecretRows logs, at start, the secret ids this process claims under
// and recognises (ids only, never a secret), and warns about live rows under
// an id it is not configured with: their keys are invisible to it, so a
// retry of one would run its operation again. On the in-memory store there
// is nothing to check. A count that cannot be read is a warning, never a
// reason not to start.
func (s *server) checkSecretRows(ctx context.Context) {
	cfg, log := s.cfg, s.log
	known := []string{cfg.SecretID}
	for _, v := range cfg.PreviousSecrets {
		known = append(known, v.ID)
	}
	if len(cfg.PreviousSecrets) > 0 || cfg.SecretID != "" {
		previous := make([]string, 0, len(cfg.PreviousSecrets))
		for _, id := range known[1:] {
			previous = append(previous, secretIDLabel(id))
		}
		log.Info("serve: claiming under secret id "+secretIDLabel(cfg.SecretID),
			slog.String("secret_id", cfg.SecretID), slog.Any("previous_secret_ids", previous))
	}
	if s.db == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.StoreTimeout)
	defer cancel()
	rows, _, err := stats.CollectSecretRows(ctx, s.db)
	if err != nil {
		log.Warn("serve: cannot count the rows per secret id", "err", err)
		return
	}
	for _, r := range rows {
		if !slices.Contains(known, r.SecretID) {
			log.Warn("serve: live rows under a secret id this process is not configured with; their keys are "+
				"not recognised here, so a retry of one runs again: add that secret to "+
				"IDEMPOTENCY_PREVIOUS_SECRETS (docs/OPERATIONS.md, \"Rotating the secret\")",
				slog.String("secret_id", secretIDLabel(r.SecretID)), slog.Int64("rows", r.Live),
				slog.Time("last_expires_at", r.LastExpires))
		}
	}
}
