package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/idemguard/idemguard/internal/config"
)

const healthUsage = `usage: idemguard health [--url URL] [--timeout D]

Asks a running idemguard serve whether it answers: GET URL (by default /healthz on
the address of $IDEMGUARD_LISTEN, with 0.0.0.0 or :: read as loopback). Exit 0
on 200, 1 otherwise. It is the container image's health check: the image has no
shell and no curl.

flags:
`

// runHealth implements `idemguard health`.
func runHealth(ctx context.Context, e env, args []string) int {
	fs := newFlagSet(e, "health", healthUsage)
	url := fs.String("url", "", "the URL to GET (default http://<$"+config.EnvListen+", loopback for 0.0.0.0 or ::>/healthz)")
	timeout := fs.Duration("timeout", 2*time.Second, "give up after this long")
	if code, ok := parseFlagsOnly(e, fs, args); !ok {
		return code
	}
	target := *url
	if target == "" {
		var err error
		if target, err = healthURL(e.getenv(config.EnvListen)); err != nil {
			fmt.Fprintf(e.stderr, "idemguard health: %s: %v\n", config.EnvListen, err)
			return exitUsage
		}
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		fmt.Fprintf(e.stderr, "idemguard health: %v\n", err)
		return exitUsage
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintf(e.stderr, "idemguard health: %v\n", err)
		return exitError
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(e.stderr, "idemguard health: %s answered %s\n", target, resp.Status)
		return exitError
	}
	fmt.Fprintf(e.stdout, "ok: %s\n", target)
	return exitOK
}

// healthURL is /healthz on the address serve listens on (listen as in IDEMGUARD_LISTEN; empty
// is serve's default), with an unspecified host (all interfaces) asked on loopback.
func healthURL(listen string) (string, error) {
	listen = strings.TrimSpace(listen)
	if listen == "" {
		listen = config.DefaultListen
	}
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", err
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
		if ip != nil && ip.To4() == nil {
			host = "::1"
		}
	}
	return "http://" + net.JoinHostPort(host, port) + "/healthz", nil
}
