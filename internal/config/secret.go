// Package config loads idemguard's settings: a file plus environment
// overrides, validated at start with messages that name the bad setting.
package config

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"strings"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/keys"
)

// EnvSecret names the environment variable holding the HMAC secret.
const EnvSecret = "IDEMPOTENCY_SECRET"

// Secret returns the HMAC secret from value (the IDEMPOTENCY_SECRET setting).
// Outside development mode a missing or short secret is an error that says
// what to set. In development mode a missing secret is replaced by a random
// per-process one (generated reports it, so the caller can log a warning);
// a short one is still an error: it was set on purpose, and wrongly.
func Secret(value string, development bool) (secret []byte, generated bool, err error) {
	switch {
	case value == "" && development:
		b := make([]byte, 32)
		if _, err := rand.Read(b); err != nil {
			return nil, false, fmt.Errorf("generating a development secret: %w", err)
		}
		return b, true, nil
	case value == "":
		return nil, false, fmt.Errorf("%s is not set: set it to a random string of at least %d bytes "+
			"(e.g. `openssl rand -hex 32`); every replica of one deployment must share it", EnvSecret, keys.MinSecretBytes)
	case len(value) < keys.MinSecretBytes:
		return nil, false, fmt.Errorf("%s is %d bytes long; it must be at least %d bytes (e.g. `openssl rand -hex 32`)",
			EnvSecret, len(value), keys.MinSecretBytes)
	}
	return []byte(value), false, nil
}

// Environment variables of a secret rotation (docs/OPERATIONS.md). Like
// IDEMPOTENCY_SECRET, the previous secrets are read only from the
// environment; the id, which is no secret, may also be set in the file.
const (
	// EnvSecretID names IDEMPOTENCY_SECRET in the rows made under it.
	EnvSecretID = "IDEMPOTENCY_SECRET_ID"
	// EnvPreviousSecrets lists the secrets still recognised, as
	// id1:secret1,id2:secret2.
	EnvPreviousSecrets = "IDEMPOTENCY_PREVIOUS_SECRETS"
)

// PreviousSecrets parses value (the IDEMPOTENCY_PREVIOUS_SECRETS setting):
// comma-separated id:secret entries, each id 1 to 32 characters of
// [A-Za-z0-9._-] (an empty id, ":secret", names the unnamed secret of rows
// made before secrets had ids), each secret at least 32 bytes without a
// comma. Messages name the entry by position and id, never its secret.
func PreviousSecrets(value string) ([]idemguard.SecretVersion, error) {
	var out []idemguard.SecretVersion
	for i, entry := range strings.Split(value, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		id, secret, ok := strings.Cut(entry, ":")
		if !ok {
			return nil, fmt.Errorf("%s entry %d has no id: write id:secret (an empty id, :secret, names the unnamed secret)",
				EnvPreviousSecrets, i+1)
		}
		if err := keys.ValidateSecretID(id); err != nil {
			return nil, fmt.Errorf("%s entry %d: %w", EnvPreviousSecrets, i+1, err)
		}
		if len(secret) < keys.MinSecretBytes {
			return nil, fmt.Errorf("%s entry %d (id %q): the secret is %d bytes long; it must be at least %d bytes",
				EnvPreviousSecrets, i+1, id, len(secret), keys.MinSecretBytes)
		}
		out = append(out, idemguard.SecretVersion{ID: id, Secret: []byte(secret)})
	}
	return out, nil
}

// checkSecrets reports a secret id or a previous-secret list that the guard
// would refuse, named by its environment variable.
func checkSecrets(current []byte, id string, previous []idemguard.SecretVersion) error {
	if err := keys.ValidateSecretID(id); err != nil {
		return fmt.Errorf("%s: %w", EnvSecretID, err)
	}
	seen := map[string]bool{id: true}
	for i, v := range previous {
		if seen[v.ID] {
			return fmt.Errorf("%s entry %d: the id %q is used twice (%s included); every secret needs its own id",
				EnvPreviousSecrets, i+1, v.ID, EnvSecretID)
		}
		seen[v.ID] = true
		if bytes.Equal(v.Secret, current) {
			return fmt.Errorf("%s entry %d (id %q) is %s itself; remove it", EnvPreviousSecrets, i+1, v.ID, EnvSecret)
		}
		for _, w := range previous[:i] {
			if bytes.Equal(w.Secret, v.Secret) {
				return fmt.Errorf("%s holds one secret twice (ids %q and %q)", EnvPreviousSecrets, w.ID, v.ID)
			}
		}
	}
	return nil
}
