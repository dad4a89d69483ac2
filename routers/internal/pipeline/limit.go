package pipeline

import (
	"net/http"
	"time"

	"github.com/idemguard/idemguard/sanitize"
)

// The limits a tenant's request can exceed (routers.Limits). Each is the
// slug of its problem type, so a client tells them apart by type.
const (
	LimitConcurrent      = "concurrency-limit"
	LimitJobs            = "job-limit"
	LimitRate            = "rate-limit"
	LimitScopeConcurrent = "scope-concurrency-limit"
	LimitScopeJobs       = "scope-job-limit"
	LimitScopeRate       = "scope-rate-limit"
)

// LimitNames lists every limit, e.g. for the series a metric exports
// from the start.
var LimitNames = []string{LimitConcurrent, LimitJobs, LimitRate, LimitScopeConcurrent, LimitScopeJobs, LimitScopeRate}

// LimitError is a request refused because its tenant is over Limit: 429
// with a problem type that names the limit, and Retry-After (RetryAfter
// when known, else the Answers' own).
type LimitError struct {
	Limit      string
	RetryAfter time.Duration
}

func (e *LimitError) Error() string { return "over the tenant's limit: " + e.Limit }

// limitProblems are the problems of the limits, by limit.
var limitProblems = map[string]Problem{
	LimitConcurrent: NewProblem(http.StatusTooManyRequests, LimitConcurrent, "Too many concurrent executions", sanitize.RateLimited,
		"your tenant runs as many operations at once as it may; nothing was run or stored: retry after Retry-After seconds"),
	LimitJobs: NewProblem(http.StatusTooManyRequests, LimitJobs, "Too many background jobs", sanitize.RateLimited,
		"your tenant runs as many background jobs (Prefer: respond-async) at once as it may; nothing was run or stored: retry after Retry-After seconds"),
	LimitRate: NewProblem(http.StatusTooManyRequests, LimitRate, "Too many requests", sanitize.RateLimited,
		"your tenant sent more requests than its rate allows; retry after Retry-After seconds"),
	LimitScopeConcurrent: NewProblem(http.StatusTooManyRequests, LimitScopeConcurrent, "Too many concurrent executions in this scope", sanitize.RateLimited,
		"your tenant runs as many operations of this scope at once as it may; nothing was run or stored: retry after Retry-After seconds"),
	LimitScopeJobs: NewProblem(http.StatusTooManyRequests, LimitScopeJobs, "Too many background jobs in this scope", sanitize.RateLimited,
		"your tenant runs as many background jobs of this scope at once as it may; nothing was run or stored: retry after Retry-After seconds"),
	LimitScopeRate: NewProblem(http.StatusTooManyRequests, LimitScopeRate, "Too many requests in this scope", sanitize.RateLimited,
		"your tenant sent more requests to this scope than its rate allows; retry after Retry-After seconds"),
}
