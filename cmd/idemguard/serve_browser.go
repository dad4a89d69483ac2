package main

import (
	"log/slog"

	"github.com/idemguard/idemguard/internal/config"
	"github.com/idemguard/idemguard/internal/webui"
	"github.com/idemguard/idemguard/routers"
	"github.com/idemguard/idemguard/routers/auth"
)

// browserOptions sets what browsers need on o: the JWT verifier (when jwt is
// configured; the caller closes it), the credentials of each scope, and in
// development mode loopback CORS origins and the demo page at /.
func browserOptions(cfg *config.Config, log *slog.Logger, o *routers.Options) (*auth.JWTVerifier, error) {
	var v *auth.JWTVerifier
	if cfg.JWT.Enabled() {
		jc := cfg.JWTConfig()
		jc.Logger = log
		var err error
		if v, err = auth.NewJWTVerifier(jc); err != nil {
			return nil, err
		}
		log.Info("serve: JWTs accepted", "jwks_url", cfg.JWT.JWKSURL, "issuer", cfg.JWT.Issuer,
			"audience", cfg.JWT.Audience, "tenant_claim", cfg.JWT.TenantClaim)
	}
	o.JWT = v
	o.ScopeAuth = make(map[string][]auth.Method)
	for _, s := range cfg.Scopes {
		if len(s.Auth) > 0 {
			o.ScopeAuth[s.Name] = s.Auth
		}
	}
	if cfg.Mode == config.Development {
		o.CORSLoopback = true
		o.Page = webui.Handler()
	}
	return v, nil
}

// pageNote is the development banner's line about the demo page.
func pageNote(addr string) string {
	return "Demo page: http://" + addr + "/ (a prompt box wired to @idemguard/client).\n"
}
