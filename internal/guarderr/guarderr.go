// Package guarderr holds the sentinel errors that cross the line between the
// engine and the public package idemguard. Both name these values, so
// errors.Is and context.Cause comparisons hold whichever package a caller
// imports. It imports nothing of idemguard's: it is a leaf.
package guarderr

import "errors"

// The sentinels; idemguard's root package documents each.
var (
	InvalidInput        = errors.New("idemguard: invalid input")
	FingerprintMismatch = errors.New("idemguard: idempotency key reused with different inputs")
	StoreUnavailable    = errors.New("idemguard: store unavailable")
	OwnershipLost       = errors.New("idemguard: claim ownership lost")
	ShuttingDown        = errors.New("idemguard: guard shutting down")
	NotFound            = errors.New("idemguard: row not found")
	InvalidResult       = errors.New("idemguard: operation returned an invalid result")
)
