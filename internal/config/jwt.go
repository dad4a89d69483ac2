package config

import (
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/idemguard/idemguard/routers/auth"
)

// methods parses a scope's auth list; empty means auth.DefaultMethods.
func (p *problems) methods(setting string, raw []string) []auth.Method {
	if len(raw) == 0 {
		return nil
	}
	out := make([]auth.Method, 0, len(raw))
	for i, s := range raw {
		m, err := auth.ParseMethod(strings.TrimSpace(s))
		if err != nil {
			p.add(fmt.Sprintf("%s[%d]", setting, i), "%v", err)
			continue
		}
		if !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	return out
}

// AcceptsJWT reports whether the scope takes browsers' JWTs.
func (s Scope) AcceptsJWT() bool { return slices.Contains(s.Auth, auth.MethodJWT) }

// validateJWT checks the jwt settings, and that every scope accepting JWTs
// has them.
func (c *Config) validateJWT() problems {
	var p problems
	var jwtScopes []string
	for i, s := range c.Scopes {
		if s.AcceptsJWT() {
			jwtScopes = append(jwtScopes, fmt.Sprintf("scopes[%d]", i))
		}
		for j, m := range s.Auth {
			if _, err := auth.ParseMethod(string(m)); err != nil {
				p.add(fmt.Sprintf("scopes[%d].auth[%d]", i, j), "%v", err)
			}
		}
	}
	j := c.JWT
	if !j.Enabled() {
		if len(jwtScopes) > 0 {
			p.add("jwt.jwks_url", "is required: %s accept(s) jwt; set jwt.jwks_url (or %s), jwt.issuer and jwt.audience",
				strings.Join(jwtScopes, ", "), EnvJWTJWKSURL)
		}
		return p
	}
	if err := auth.CheckJWKSURL(j.JWKSURL); err != nil {
		p.add("jwt.jwks_url", "%v (env %s)", err, EnvJWTJWKSURL)
	} else if u, _ := url.Parse(j.JWKSURL); u.Scheme != "https" && c.Mode == Production {
		p.add("jwt.jwks_url", "must be https in production mode: the key set decides who is which tenant")
	}
	if j.Issuer == "" {
		p.add("jwt.issuer", "is required with jwt.jwks_url: the iss claim of your identity provider's tokens (env %s)", EnvJWTIssuer)
	}
	if j.Audience == "" {
		p.add("jwt.audience", "is required with jwt.jwks_url: the aud value your identity provider issues for idemguard (env %s)", EnvJWTAudience)
	}
	if len(j.Tenants) == 0 && c.Mode == Production {
		p.add("jwt.tenants", "is required in production mode: list the tenants your identity provider's tokens may name "+
			"(a token naming another tenant is refused), e.g. tenants: [acme]")
	}
	if strings.TrimSpace(j.TenantClaim) == "" {
		p.add("jwt.tenant_claim", "must name the claim holding the tenant id, e.g. %s", auth.DefaultTenantClaim)
	}
	p.between("jwt.leeway", j.Leeway, 0, auth.MaxJWTLeeway)
	for i, a := range j.Algorithms {
		if err := auth.CheckJWTAlgorithm(a); err != nil {
			p.add(fmt.Sprintf("jwt.algorithms[%d]", i), "%v", err)
		}
	}
	return p
}

// JWTConfig returns the tenancy settings of c.JWT.
func (c *Config) JWTConfig() auth.JWTConfig {
	leeway := c.JWT.Leeway
	if leeway == 0 {
		leeway = -1 // configured as none: auth's 0 would mean its default
	}
	return auth.JWTConfig{
		JWKSURL:     c.JWT.JWKSURL,
		Issuer:      c.JWT.Issuer,
		Audience:    c.JWT.Audience,
		TenantClaim: c.JWT.TenantClaim,
		Leeway:      leeway,
		Algorithms:  slices.Clone(c.JWT.Algorithms),
		Tenants:     slices.Clone(c.JWT.Tenants),
	}
}
