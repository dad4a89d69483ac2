package idemguard

import (
	"fmt"
	"strings"
	"unicode"

	"github.com/idemguard/idemguard/internal/keys"
	"github.com/idemguard/idemguard/tenancy"
)

// Key names one idempotency key of a tenant's scope for Lookup, Watch,
// Cancel and History, so that a tenant, a scope and a key can never be
// passed in each other's place. A Guard makes it: Guard.Key from the client
// key a caller sent, Guard.KeyOfHash from a key hash (Result.KeyHash or
// KeyInfo.KeyHash, the only name of a key derived from its inputs). The
// zero Key names no key; the verbs answer it with ErrInvalidInput.
type Key struct {
	tenant tenancy.ID
	scope  string
	// hash is the key's hash under the current secret, or the hash given.
	hash string
	// clientKey is set when the Key was made from a client key: Lookup and
	// History then also find the key's rows under previous secrets, in
	// principal's key space.
	clientKey, principal string
}

// Hash is the key's hash: for a Key made from a client key, its hash under
// the Guard's current secret, as Result.KeyHash carries it.
func (k Key) Hash() string { return k.hash }

func (k Key) check() error {
	if k.hash == "" {
		return fmt.Errorf("%w: the zero Key names no key (make one with Guard.Key or Guard.KeyOfHash)", ErrInvalidInput)
	}
	return nil
}

// Key returns the Key of clientKey in tenant's scope. It returns
// ErrInvalidInput for a malformed tenant, scope or client key.
func (g *Guard) Key(tenant tenancy.ID, scope, clientKey string) (Key, error) {
	return g.PrincipalKey(tenant, scope, "", clientKey)
}

// PrincipalKey returns the Key of clientKey in principal's key space of
// tenant's scope (Call.Principal): the key that principal's calls with
// that client key made. Another principal's key of the same name is
// another key. An empty principal is Key.
func (g *Guard) PrincipalKey(tenant tenancy.ID, scope, principal, clientKey string) (Key, error) {
	if err := validTenantScope(tenant, scope); err != nil {
		return Key{}, err
	}
	if err := keys.ValidateClientKey(clientKey); err != nil {
		return Key{}, fmt.Errorf("%w: %w", ErrInvalidInput, err)
	}
	if err := validPrincipal(principal); err != nil {
		return Key{}, err
	}
	return Key{tenant: tenant, scope: scope, clientKey: clientKey, principal: principal,
		hash: g.deriver.PrincipalKeyHash(string(tenant), scope, principal, clientKey, nil)}, nil
}

// maxPrincipalLen is the longest Call.Principal accepted, in bytes.
const maxPrincipalLen = 1024

// validPrincipal checks Call.Principal: printable, at most maxPrincipalLen
// bytes. The error never quotes it (it may name a person).
func validPrincipal(p string) error {
	if len(p) > maxPrincipalLen {
		return fmt.Errorf("%w: Principal must be at most %d bytes, got %d", ErrInvalidInput, maxPrincipalLen, len(p))
	}
	if strings.IndexFunc(p, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return fmt.Errorf("%w: Principal must be printable", ErrInvalidInput)
	}
	return nil
}

// KeyOfHash returns the Key whose hash is keyHash (64 lowercase hex
// characters, as Result.KeyHash carries it) in tenant's scope. It returns
// ErrInvalidInput for a malformed tenant, scope or hash.
func (g *Guard) KeyOfHash(tenant tenancy.ID, scope, keyHash string) (Key, error) {
	if err := validTenantScope(tenant, scope); err != nil {
		return Key{}, err
	}
	if !isKeyHash(keyHash) {
		return Key{}, fmt.Errorf("%w: a key hash is 64 lowercase hex characters", ErrInvalidInput)
	}
	return Key{tenant: tenant, scope: scope, hash: keyHash}, nil
}

func validTenantScope(tenant tenancy.ID, scope string) error {
	if _, err := tenancy.ParseID(string(tenant)); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidInput, err)
	}
	if err := keys.ValidateScope(scope); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidInput, err)
	}
	return nil
}

func isKeyHash(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
