// Package config loads idemguard's settings: a file plus environment
// overrides, validated at start with messages that name the bad setting.
package config

import (
	"crypto/rand"
	"fmt"

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
