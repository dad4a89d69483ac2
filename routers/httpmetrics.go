package routers

import (
	"time"

	"github.com/gin-gonic/gin"
)

// UnmatchedRoute is the route label of a request that matches no route (404, 405).
const UnmatchedRoute = "unmatched"

// HTTPMetrics receives one observation per answered request. The serve binary's Prometheus
// metrics implement it; implement it to feed your own.
type HTTPMetrics interface {
	// InitRoutes is called once by New with every route template it serves, and
	// UnmatchedRoute, so that their series exist before the first request.
	InitRoutes(routes []string)
	// ObserveRequest records one answered request: the gin route template (never the raw
	// path, which holds client keys), the status sent and the time taken.
	ObserveRequest(route string, status int, elapsed time.Duration)
}

// initHTTPMetrics hands m the route templates r serves.
func initHTTPMetrics(m HTTPMetrics, r *gin.Engine) {
	seen := map[string]bool{UnmatchedRoute: true}
	routes := []string{UnmatchedRoute}
	for _, rt := range r.Routes() {
		if !seen[rt.Path] {
			seen[rt.Path] = true
			routes = append(routes, rt.Path)
		}
	}
	m.InitRoutes(routes)
}
