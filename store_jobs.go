package idemguard

import "time"

// RenewParams are the arguments of Store.Renew.
type RenewParams struct {
	ID    uint64
	Nonce string
	// Extend keeps the row alive while it runs: expires_at becomes at
	// least now + Extend (never earlier than it was), so neither cleanup
	// nor an expired re-claim can touch a running execution, however much
	// longer than its TTL it runs.
	Extend time.Duration
}

// RenewResult is what Store.Renew reports.
type RenewResult struct {
	// Renewed is true when the row was still the caller's (started, its
	// nonce) and its heartbeat moved forward.
	Renewed bool
	// CancelRequested is true when the renewed row carries a cancel
	// request.
	CancelRequested bool
}

// CancelParams are the arguments of Store.RequestCancel: the execution the
// caller read (row ID, its claim nonce).
type CancelParams struct {
	ID    uint64
	Nonce string
	Audit *AuditEvent // written atomically with a recorded request
}
