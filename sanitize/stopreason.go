package sanitize

// StopReason says why an operation stopped. It is a closed enum: any other
// value becomes [Unknown].
type StopReason string

// The stop reasons. completed and needs_human (a business answer with
// ok:false) end a successful run; in_progress answers a duplicate while the
// key runs elsewhere. A failed run stops with provider_error, rate_limited,
// timeout or unknown, which a later call may retry while attempts remain, or
// with invalid_input (the inputs were rejected), which is final.
// retry_limit and abandoned are final too: the key ran out of attempts, or
// its run was given up under stale policy fail. unknown also stands for any
// value outside the enum.
const (
	Completed     StopReason = "completed"
	InProgress    StopReason = "in_progress"
	NeedsHuman    StopReason = "needs_human"
	InvalidInput  StopReason = "invalid_input"
	ProviderError StopReason = "provider_error"
	RateLimited   StopReason = "rate_limited"
	Timeout       StopReason = "timeout"
	RetryLimit    StopReason = "retry_limit"
	Abandoned     StopReason = "abandoned"
	Canceled      StopReason = "canceled"
	Unknown       StopReason = "unknown"
)

// StopReasons returns every member of the enum, in declaration order.
func StopReasons() []StopReason {
	return []StopReason{
		Completed, InProgress, NeedsHuman, InvalidInput, ProviderError,
		RateLimited, Timeout, RetryLimit, Abandoned, Canceled, Unknown,
	}
}

// ParseStopReason returns s as a StopReason when it is a member of the enum
// (compared exactly, case-sensitively) and [Unknown] otherwise.
func ParseStopReason(s string) StopReason {
	switch r := StopReason(s); r {
	case Completed, InProgress, NeedsHuman, InvalidInput, ProviderError,
		RateLimited, Timeout, RetryLimit, Abandoned, Canceled, Unknown:
		return r
	default:
		return Unknown
	}
}

// Valid reports whether r is a member of the enum.
func (r StopReason) Valid() bool { return ParseStopReason(string(r)) == r }

// String returns the wire form of r.
func (r StopReason) String() string { return string(r) }
