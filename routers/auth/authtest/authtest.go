// Package authtest is a test identity provider: signing keys of the
// algorithms browsers' tokens use, and a JWKS server whose key set a test
// can replace (key rotation) and whose fetches it can count.
package authtest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"
)

// The issuer and audience of the tokens Key.Sign makes.
const (
	Issuer   = "https://idp.test/"
	Audience = "idemguard-test"
)

// Key is one signing key of the identity provider.
type Key struct {
	KID    string
	Method jwt.SigningMethod
	Priv   crypto.Signer
}

// RSA returns an RS256 key (2048 bits).
func RSA(t testing.TB, kid string) Key {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	return Key{kid, jwt.SigningMethodRS256, k}
}

// EC returns an ES256 key (P-256).
func EC(t testing.TB, kid string) Key {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	return Key{kid, jwt.SigningMethodES256, k}
}

// Ed returns an EdDSA key (Ed25519).
func Ed(t testing.TB, kid string) Key {
	_, k, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	return Key{kid, jwt.SigningMethodEdDSA, k}
}

// Sign returns a token for tenant with valid iss, aud, iat and exp (5
// minutes), changed by mutate (nil: none).
func (k Key) Sign(t testing.TB, tenant string, mutate func(jwt.MapClaims)) string {
	t.Helper()
	now := time.Now()
	claims := jwt.MapClaims{
		"iss": Issuer, "aud": Audience, "sub": "user-1", "tenant_id": tenant,
		"iat": now.Unix(), "exp": now.Add(5 * time.Minute).Unix(),
	}
	if mutate != nil {
		mutate(claims)
	}
	tok := jwt.NewWithClaims(k.Method, claims)
	tok.Header["kid"] = k.KID
	out, err := tok.SignedString(k.Priv)
	require.NoError(t, err)
	return out
}

// IDP serves a JWK Set at URL.
type IDP struct {
	URL     string
	mu      sync.Mutex
	jwks    []byte
	fetches atomic.Int64
}

// NewIDP starts a JWKS server publishing the public halves of keys; it stops
// when the test ends.
func NewIDP(t testing.TB, keys ...Key) *IDP {
	t.Helper()
	p := &IDP{}
	p.Publish(t, keys...)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		p.fetches.Add(1)
		p.mu.Lock()
		b := p.jwks
		p.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b)
	}))
	t.Cleanup(srv.Close)
	p.URL = srv.URL + "/.well-known/jwks.json"
	return p
}

// Publish replaces the published key set (key rotation).
func (p *IDP) Publish(t testing.TB, keys ...Key) {
	t.Helper()
	set := jwkset.JWKSMarshal{Keys: []jwkset.JWKMarshal{}}
	for _, k := range keys {
		jwk, err := jwkset.NewJWKFromKey(k.Priv.Public(), jwkset.JWKOptions{
			Metadata: jwkset.JWKMetadataOptions{KID: k.KID, ALG: jwkset.ALG(k.Method.Alg()), USE: jwkset.UseSig},
		})
		require.NoError(t, err)
		set.Keys = append(set.Keys, jwk.Marshal())
	}
	b, err := json.Marshal(set)
	require.NoError(t, err)
	p.mu.Lock()
	p.jwks = b
	p.mu.Unlock()
}

// Fetches counts the requests for the key set.
func (p *IDP) Fetches() int64 { return p.fetches.Load() }
