package main

// The container image is built FROM scratch: no /etc/ssl. With the fallback roots compiled in,
// HTTPS upstreams (a model provider, a JWKS endpoint) still verify. They are used only when the
// system has no roots of its own; a host's or image's CA bundle (SSL_CERT_FILE, SSL_CERT_DIR)
// wins, so a private CA keeps working where one is installed.
import _ "golang.org/x/crypto/x509roots/fallback"
