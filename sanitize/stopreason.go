package sanitize

// StopReason says why an operation stopped. It is a closed enum: any other
// value becomes [Unknown].
type StopReason string

// The stop reasons of DESIGN §6.
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
