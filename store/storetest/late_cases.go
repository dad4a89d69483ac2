package storetest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/faulttest"
	"github.com/idemguard/idemguard/store"
)

// A write whose outcome was unknown may land after its caller's re-read
// (an INSERT still waiting on a row lock when the store timeout
// fired; cancelling closes the connection, the server's statement goes on).
// The caller keeps its unconfirmed nonces: a row holding one is its own, and
// one it never confirmed is released once it lands, so nothing is orphaned.

// lateStore reports an unknown outcome for the armed write without applying
// it, and applies it later: right after the next Get has answered (the
// caller's re-read saw the row without it), or when the test calls land.
type lateStore struct {
	store.Store
	mu        sync.Mutex
	claim     bool // arm Claim
	reclaim   bool // arm Reclaim
	afterGet  bool // land right after the next Get
	onWrite   func()
	deferred  func()
	landedErr error
}

func (s *lateStore) take(armed *bool, do func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !*armed {
		return false
	}
	*armed = false
	s.deferred = do
	return true
}

func (s *lateStore) land() {
	s.mu.Lock()
	do := s.deferred
	s.deferred = nil
	s.mu.Unlock()
	if do != nil {
		do()
	}
}

func (s *lateStore) Claim(ctx context.Context, p store.ClaimParams) (uint64, error) {
	if s.take(&s.claim, func() { _, s.landedErr = s.Store.Claim(context.Background(), p) }) {
		if s.onWrite != nil {
			s.onWrite()
		}
		return 0, errUnknown
	}
	return s.Store.Claim(ctx, p)
}

func (s *lateStore) Reclaim(ctx context.Context, p store.ReclaimParams) (bool, error) {
	if s.take(&s.reclaim, func() { _, s.landedErr = s.Store.Reclaim(context.Background(), p) }) {
		if s.onWrite != nil {
			s.onWrite()
		}
		return false, errUnknown
	}
	return s.Store.Reclaim(ctx, p)
}

func (s *lateStore) Get(ctx context.Context, tenant, scope, keyHash string) (store.Record, error) {
	r, err := s.Store.Get(ctx, tenant, scope, keyHash)
	s.mu.Lock()
	now := s.afterGet && s.deferred != nil
	if now {
		s.afterGet = false
	}
	s.mu.Unlock()
	if now {
		s.land()
	}
	return r, err
}

// The claim's INSERT lands after the re-read found no row: the call's
// next claim meets a row holding its own first nonce, and runs once.
func guardClaimThatLandsAfterTheReReadIsOurs(t *testing.T, h *Harness) {
	ls := &lateStore{Store: h.Store, claim: true, afterGet: true}
	g, _ := newGuard(t, h, withStore(ls))
	var c counter
	res, err := g.Do(ctxFor(t), call("late.claim", 1), c.op(okValue, nil))
	require.NoError(t, err)
	require.NoError(t, ls.landedErr, "the late INSERT landed")
	require.Equal(t, idemguard.StatusSucceeded, res.Status, "answered %s for its own claim", res.Status)
	require.False(t, res.Cached)
	require.Equal(t, 1, c.n())
	again, err := g.Do(ctxFor(t), call("late.claim", 1), c.op(okValue, nil))
	require.NoError(t, err)
	require.True(t, again.Cached)
	require.Equal(t, 1, c.n())
}

// A retry's guarded UPDATE lands after the re-read showed the old
// failed row: the next read shows the call's own nonce, not a duplicate
// in progress.
func guardReclaimThatLandsAfterTheReReadIsOurs(t *testing.T, h *Harness) {
	ls := &lateStore{Store: h.Store}
	g, _ := newGuard(t, h, withStore(ls), withoutCache())
	var c counter
	res, err := g.Do(ctxFor(t), call("late.reclaim", 1), c.op(nil, errors.New("upstream down")))
	require.NoError(t, err)
	require.Equal(t, idemguard.StatusFailed, res.Status)
	ls.mu.Lock()
	ls.reclaim, ls.afterGet = true, true
	ls.mu.Unlock()
	res, err = g.Do(ctxFor(t), call("late.reclaim", 1), c.op(okValue, nil))
	require.NoError(t, err)
	require.NoError(t, ls.landedErr)
	require.Equal(t, idemguard.StatusSucceeded, res.Status, "answered %s for its own claim", res.Status)
	require.Equal(t, 2, res.Attempt)
	require.Equal(t, 2, c.n())
}

// The call ends without owning the claim (its caller hung up), and the
// INSERT lands only afterwards: the guard releases it, so under policy
// fail the key is not abandoned and the next call runs the operation.
func guardUnconfirmedClaimThatLandsLaterIsReleased(t *testing.T, h *Harness) {
	ctx, hangUp := context.WithCancel(ctxFor(t))
	ls := &lateStore{Store: h.Store, claim: true, onWrite: hangUp}
	g, _ := newGuard(t, h, withStore(ls))
	c := call("late.orphan", 1)
	c.Settings.StalePolicy = idemguard.StaleFail
	var runs counter
	_, err := g.Do(ctx, c, runs.op(okValue, nil))
	require.ErrorIs(t, err, idemguard.ErrStoreUnavailable)
	require.Equal(t, 0, runs.n())
	ls.land()
	// The INSERT committed a row (no error); the row itself is not asserted
	// here, since the call's background release may already have taken it.
	require.NoError(t, ls.landedErr, "the late INSERT landed")
	pollUntil(t, "the late claim to be released", func() bool {
		return len(h.rowsIn(t, "acme", "late.orphan")) == 0
	})
	res, err := g.Do(ctxFor(t), c, runs.op(okValue, nil))
	require.NoError(t, err)
	require.Equal(t, idemguard.StatusSucceeded, res.Status)
	require.Equal(t, 1, runs.n())
}

// A claim the store rejected for good (1054 unknown column, 1406 data
// too long, ...) is not retried: the re-read decides, finds no row, and
// the caller gets the store's own error.
func guardPermanentClaimErrorIsNotRetried(t *testing.T, h *Harness) {
	fs := faulttest.NewStore(h.Store)
	rejected := errors.New("Error 1054 (42S22): Unknown column 'x' in 'field list'")
	fs.Inject(faulttest.OpClaim, faulttest.Fault{Err: rejected, Times: -1})
	g, _ := newGuard(t, h, withStore(fs))
	var c counter
	_, err := g.Do(ctxFor(t), call("perm", 1), c.op(okValue, nil))
	require.ErrorIs(t, err, idemguard.ErrStoreUnavailable)
	require.ErrorIs(t, err, rejected, "the store's error is kept")
	require.Equal(t, 1, fs.Calls(faulttest.OpClaim))
	require.Equal(t, 0, c.n())
}

// A claim whose outcome stays unknown is tried again, a bounded number
// of times, and the last error is kept.
func guardUnknownClaimOutcomeIsRetriedThenReported(t *testing.T, h *Harness) {
	fs := faulttest.NewStore(h.Store)
	fs.Inject(faulttest.OpClaim, faulttest.Fault{Err: errUnknown, Times: -1})
	g, _ := newGuard(t, h, withStore(fs))
	var c counter
	_, err := g.Do(ctxFor(t), call("unknown", 1), c.op(okValue, nil))
	require.ErrorIs(t, err, idemguard.ErrStoreUnavailable)
	require.ErrorIs(t, err, store.ErrOutcomeUnknown, "the last error is kept")
	require.Greater(t, fs.Calls(faulttest.OpClaim), 1)
	require.Equal(t, 0, c.n())
}

// The renewal of a half-spent lease finds the claim taken over (the
// call spent long settling it): the call answers from the row, in
// progress, not with a store error.
func guardRenewalThatFindsTheClaimTakenOverAnswersFromTheRow(t *testing.T, h *Harness) {
	fs := faulttest.NewStore(h.Store)
	g, _ := newGuard(t, h, withStore(fs))
	const staleAfter = 600 * time.Millisecond
	c := call("renew.lost", 1)
	c.Settings.StaleAfter = staleAfter
	fs.Inject(faulttest.OpClaim, faulttest.Fault{Apply: true, Err: errUnknown})
	fs.Inject(faulttest.OpGet, faulttest.Fault{After: func(context.Context) { time.Sleep(staleAfter/2 + 50*time.Millisecond) }})
	fs.Inject(faulttest.OpHeartbeat, faulttest.Fault{Before: func(context.Context) {
		// Another process takes the claim over just before the renewal.
		r := h.find(t, "acme", "renew.lost")
		h.Age(t, "acme", "renew.lost", r.KeyHash, time.Hour)
		won, err := h.Store.Reclaim(context.Background(), store.ReclaimParams{Kind: store.ReclaimStale, ID: r.ID,
			OldNonce: r.ClaimNonce, OldAttempts: r.Attempts, NewNonce: nonce(), StaleAfter: staleAfter, Lease: time.Hour})
		require.NoError(t, err)
		require.True(t, won)
	}})
	var runs counter
	res, err := g.Do(ctxFor(t), c, runs.op(okValue, nil))
	require.NoError(t, err, "a lost renewal is not a store failure")
	require.Equal(t, idemguard.StatusInProgress, res.Status)
	require.Equal(t, 0, runs.n())
}
