// Package storetest is the conformance suite every store.Store must pass,
// the in-memory store, the MySQL store and a store written in another module
// alike. A store's tests call Exercise once:
//
//	func TestConformance(t *testing.T) {
//		storetest.Exercise(context.Background(), t, func(ctx context.Context, t *testing.T) *storetest.Harness {
//			s := memstore.New()
//			return &storetest.Harness{Store: s, Age: ..., Dump: ..., Break: ...}
//		})
//	}
//
// Every case gets a fresh store from the harness (for MySQL, a freshly
// migrated database), so cases run in parallel. Store cases ("Store/...")
// prove the guarded statements on their own; guard cases ("Guard/...") drive
// an idemguard.Guard over the store. A failure fails its case only.
//
// Cases are registered in one place, the list in cases: a new store
// behaviour is written as a case there first, so every store must pass it.
package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/idemguardtest"
	"github.com/idemguard/idemguard/internal/testlog"
	"github.com/idemguard/idemguard/store"
)

// Harness gives the suite a fresh store and the few test-only powers it
// needs to stand in for time passing and for a broken database.
type Harness struct {
	// Store is the store under test, empty.
	Store store.Store
	// Age moves every time of one row back by d, as if d had passed for it.
	Age func(t testing.TB, tenant, scope, keyHash string, d time.Duration)
	// Dump renders every row as one line of space-separated column values,
	// starting with tenant, scope and key_hash, then every other column
	// (for canary scans and for finding rows). An empty table is "".
	Dump func(t testing.TB) string
	// Break makes every later store call fail as if the database were gone.
	Break func(t testing.TB)
	// Sweep, for a store that has a cleanup, runs it once to the end: it
	// deletes every row the cleanup deletes, judging a row without a lease
	// by fallback (the cleanup's StaleAfter), and returns how many it
	// deleted. Store/StalenessRuleIsOneDefinition holds it to the staleness
	// rule (store.Record.Reclaimable). nil for a store without a cleanup:
	// that case then checks the store's guarded writes alone.
	Sweep func(t testing.TB, fallback time.Duration) int64
}

// Exercise runs the whole suite against the stores newHarness returns: every
// case as a parallel subtest of t with a fresh store, in the order cases
// lists them. ctx is given to newHarness (to create a database, say); each
// case bounds its own calls.
func Exercise(ctx context.Context, t *testing.T, newHarness func(ctx context.Context, t *testing.T) *Harness) {
	t.Helper()
	cases(uniqueNames(t, func(name string, tc caseFunc) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tc(t, newHarness(ctx, t))
		})
	}))
}

// caseFunc is one conformance case, run on a fresh store.
type caseFunc = func(t *testing.T, h *Harness)

// uniqueNames wraps run so that a subtest name used twice is an error:
// t.Run would otherwise run the second case as name#01, and a
// `go test -run` for that name would quietly pick the first.
func uniqueNames(t testing.TB, run func(name string, tc caseFunc)) func(name string, tc caseFunc) {
	seen := make(map[string]bool)
	return func(name string, tc caseFunc) {
		if seen[name] {
			t.Errorf("storetest: two cases are named %q", name)
		}
		seen[name] = true
		run(name, tc)
	}
}

// cases calls run once per case, in a fixed order, grouped by the file the
// cases live in. Each case is a named function (two with one name do not
// compile) whose subtest name is the function name less its store or guard
// prefix, so go test -run 'TestConformance/Store/FreshClaimIsStarted' finds
// storeFreshClaimIsStarted; uniqueNames catches a subtest name listed twice.
func cases(run func(name string, tc caseFunc)) {
	// Store: the guarded statements on their own (store_cases.go).
	run("Store/FreshClaimIsStarted", storeFreshClaimIsStarted)
	run("Store/ClaimOfExistingKeyIsDuplicate", storeClaimOfExistingKeyIsDuplicate)
	run("Store/SameKeyHashInOtherTenantOrScopeIsIndependent", storeSameKeyHashInOtherTenantOrScopeIsIndependent)
	run("Store/OfFiftyConcurrentClaimsExactlyOneWins", storeOfFiftyConcurrentClaimsExactlyOneWins)
	run("Store/OfTwentyConcurrentStaleTakeoversExactlyOneWins", storeOfTwentyConcurrentStaleTakeoversExactlyOneWins)
	run("Store/FreshClaimCannotBeTakenOver", storeFreshClaimCannotBeTakenOver)
	run("Store/ZombieCommitAfterTakeoverChangesNothing", storeZombieCommitAfterTakeoverChangesNothing)
	run("Store/RepeatedHeartbeatsReportOwnership", storeRepeatedHeartbeatsReportOwnership)
	run("Store/ExpiredRowIsReclaimedAsNew", storeExpiredRowIsReclaimedAsNew)
	run("Store/ExpiredButHeartbeatingRowIsNotReclaimed", storeExpiredButHeartbeatingRowIsNotReclaimed)
	run("Store/FailedRowIsRetriedOnlyBelowMaxAttempts", storeFailedRowIsRetriedOnlyBelowMaxAttempts)
	run("Store/StaleRowCanBeAbandoned", storeStaleRowCanBeAbandoned)
	run("Store/BrokenStoreReturnsErrors", storeBrokenStoreReturnsErrors)

	// Edge store: the lease and the release at their edges (edge_cases.go).
	run("Store/StalenessIsJudgedByTheOwnersLease", storeStalenessIsJudgedByTheOwnersLease)
	run("Store/ReleaseGivesBackAClaimThatNeverRan", storeReleaseGivesBackAClaimThatNeverRan)

	// The staleness rule: one definition for the guard, the store and its
	// cleanup (stale_cases.go).
	run("Store/StalenessRuleIsOneDefinition", storeStalenessRuleIsOneDefinition)

	// Guard: Do over the store (guard_cases.go).
	run("Guard/FirstCallRunsThenReplaysByteForByte", guardFirstCallRunsThenReplaysByteForByte)
	run("Guard/BusinessFailureIsASuccessAndReplayed", guardBusinessFailureIsASuccessAndReplayed)
	run("Guard/BlockedFieldsAreNeverStoredOrReplayed", guardBlockedFieldsAreNeverStoredOrReplayed)
	run("Guard/KeptDocumentIsReplayedByteForByte", guardKeptDocumentIsReplayedByteForByte)
	run("Guard/ErrorStatusIsNeverStoredAsOK", guardErrorStatusIsNeverStoredAsOK)
	run("Guard/EnvelopeHeadersAreReplayed", guardEnvelopeHeadersAreReplayed)
	run("Guard/CheckRunsOnlyBeforeAClaim", guardCheckRunsOnlyBeforeAClaim)
	run("Guard/OversizeDataIsDroppedAndReplayedTheSame", guardOversizeDataIsDroppedAndReplayedTheSame)
	run("Guard/DuplicateWhileRunningIsInProgressOrWaits", guardDuplicateWhileRunningIsInProgressOrWaits)
	run("Guard/BoundedWaitGivesUpWithInProgress", guardBoundedWaitGivesUpWithInProgress)
	run("Guard/TwoHundredConcurrentCallersRunTheOperationOnce", guardTwoHundredConcurrentCallersRunTheOperationOnce)
	run("Guard/TwentyCallersOnAStaleRowTakeItOverOnce", guardTwentyCallersOnAStaleRowTakeItOverOnce)
	run("Guard/ZombieOwnerNeverOverwritesTheNewOwner", guardZombieOwnerNeverOverwritesTheNewOwner)
	run("Guard/FailedIsRetriedUntilMaxAttemptsThenRetryLimit", guardFailedIsRetriedUntilMaxAttemptsThenRetryLimit)
	run("Guard/FailureThenSuccessOnRetry", guardFailureThenSuccessOnRetry)
	run("Guard/PanicIsRecoveredAndRecordedAsFailure", guardPanicIsRecoveredAndRecordedAsFailure)
	run("Guard/TimeoutFailsWithStopReasonTimeout", guardTimeoutFailsWithStopReasonTimeout)
	run("Guard/ExpiredKeyIsClaimableAgain", guardExpiredKeyIsClaimableAgain)
	run("Guard/SameClientKeyWithOtherInputsIsAMismatch", guardSameClientKeyWithOtherInputsIsAMismatch)
	run("Guard/TenantsAndScopesAreIndependent", guardTenantsAndScopesAreIndependent)
	run("Guard/PolicyFailMarksAStaleRowAbandoned", guardPolicyFailMarksAStaleRowAbandoned)
	run("Guard/HeartbeatingLongOperationIsNeverTakenOver", guardHeartbeatingLongOperationIsNeverTakenOver)
	run("Guard/LostHeartbeatCancelsTheOperation", guardLostHeartbeatCancelsTheOperation)
	run("Guard/NoRawKeyTextOrSecretInTableOrLogs", guardNoRawKeyTextOrSecretInTableOrLogs)
	run("Guard/StoreDownMeansTheOperationDoesNotRun", guardStoreDownMeansTheOperationDoesNotRun)
	run("Guard/InvalidInputChangesNothing", guardInvalidInputChangesNothing)

	// Edge guard: faults injected around the store, every unknown outcome
	// settled by re-reading the row (edge_cases.go).
	run("Guard/LostClaimReplyIsSettledByTheRow", guardLostClaimReplyIsSettledByTheRow)
	run("Guard/UnsettledClaimLeavesNoClaimBehind", guardUnsettledClaimLeavesNoClaimBehind)
	run("Guard/SpentLeaseIsRenewedBeforeTheOperationStarts", guardSpentLeaseIsRenewedBeforeTheOperationStarts)
	run("Guard/CallerHangUpDuringClaimLeavesNoClaim", guardCallerHangUpDuringClaimLeavesNoClaim)
	run("Guard/LostReclaimReplyIsSettledByTheRow", guardLostReclaimReplyIsSettledByTheRow)
	run("Guard/UnknownCommitOutcomeStillStoresTheResult", guardUnknownCommitOutcomeStillStoresTheResult)
	run("Guard/CommitThatAlwaysFailsIsBoundedByTheLease", guardCommitThatAlwaysFailsIsBoundedByTheLease)
	run("Guard/FailingHeartbeatsDoNotCancelAHealthyOperation", guardFailingHeartbeatsDoNotCancelAHealthyOperation)
	run("Guard/SilentStoreCancelsTheOperationBeforeItsLeaseEnds", guardSilentStoreCancelsTheOperationBeforeItsLeaseEnds)
	run("Guard/CloseRacingAClaimRunsNothingAndAbandonsNothing", guardCloseRacingAClaimRunsNothingAndAbandonsNothing)
	run("Guard/RollingStaleAfterChangeNeverTakesOverAHealthyRun", guardRollingStaleAfterChangeNeverTakesOverAHealthyRun)
	run("Guard/LookupJudgesStalenessByTheRowsLease", guardLookupJudgesStalenessByTheRowsLease)
	run("Guard/UpstreamRejectionOfTheInputsIsFinal", guardUpstreamRejectionOfTheInputsIsFinal)

	// Late guard: writes whose unknown outcome lands after the caller re-read the row (late_cases.go).
	run("Guard/ClaimThatLandsAfterTheReReadIsOurs", guardClaimThatLandsAfterTheReReadIsOurs)
	run("Guard/ReclaimThatLandsAfterTheReReadIsOurs", guardReclaimThatLandsAfterTheReReadIsOurs)
	run("Guard/UnconfirmedClaimThatLandsLaterIsReleased", guardUnconfirmedClaimThatLandsLaterIsReleased)
	run("Guard/PermanentClaimErrorIsNotRetried", guardPermanentClaimErrorIsNotRetried)
	run("Guard/UnknownClaimOutcomeIsRetriedThenReported", guardUnknownClaimOutcomeIsRetriedThenReported)
	run("Guard/RenewalThatFindsTheClaimTakenOverAnswersFromTheRow", guardRenewalThatFindsTheClaimTakenOverAnswersFromTheRow)

	// Jobs: background operations, cancel and watch (job_cases.go).
	run("Store/RequestCancelIsGuardedByTheExecution", jobRequestCancelIsGuardedByTheExecution)
	run("Store/RenewReportsCancelAndKeepsTheRowAlive", jobRenewReportsCancelAndKeepsTheRowAlive)
	run("Store/RenewCarriesProgress", jobRenewCarriesProgress)
	run("Store/ReclaimClearsTheCancelAndCanceledGivesTheAttemptBack", jobReclaimClearsTheCancel)
	run("Guard/StartAnswersAtOnceAndRunsOnce", jobStartAnswersAtOnceAndRunsOnce)
	run("Guard/CancelFromAnotherProcessStopsTheOwnerAndTheKeyRunsAgain", jobCancelFromAnotherProcess)
	run("Guard/WatchFromAnotherProcessReportsEveryTransitionInOrder", jobWatchReportsEveryTransition)
	run("Guard/WatchersAreBounded", jobWatchersAreBounded)
	run("Guard/WaitJobsRefusesNewJobsAndWaitsForRunningOnes", jobWaitJobs)
	// Reset and forced runs (reset_cases.go).
	run("Store/ResetIsGuardedAndEndsTheLife", storeResetIsGuardedAndEndsTheLife)
	run("Store/OfTwentyConcurrentForcedReclaimsExactlyOneWins", storeOfTwentyConcurrentForcedReclaimsExactlyOneWins)
	run("Guard/ResetAndForcedRunsOverTheStore", guardResetAndForcedRunsOverTheStore)
	// Secret rotation: rows under every configured secret count, and two
	// hashes of one request never both run (secret_cases.go).
	run("Store/SecretIDIsRecordedAndReadBack", storeSecretIDIsRecordedAndReadBack)
	run("Store/GetManyReadsEveryHashOfOneTenantAndScope", storeGetManyReadsEveryHashOfOneTenantAndScope)
	run("Guard/KeyCompletedUnderTheOldSecretIsReplayedUnderTheNew", guardKeyCompletedUnderTheOldSecretIsReplayedUnderTheNew)
	run("Guard/OldSecretReplayIsServedFromTheReplayCache", guardOldSecretReplayIsServedFromTheReplayCache)
	run("Guard/RunningUnderOneSecretIsInProgressUnderTheOther", guardRunningUnderOneSecretIsInProgressUnderTheOther)
	run("Guard/FailedUnderTheOldSecretIsRetriedOnItsOwnRow", guardFailedUnderTheOldSecretIsRetriedOnItsOwnRow)
	run("Guard/StaleUnderTheOldSecretIsTakenOverOnItsOwnRow", guardStaleUnderTheOldSecretIsTakenOverOnItsOwnRow)
	run("Guard/ExpiredRowUnderTheOldSecretIsClaimedAnewUnderTheNew", guardExpiredRowUnderTheOldSecretIsClaimedAnewUnderTheNew)
	run("Guard/UnreadableOtherSecretRowsMeanNothingRuns", guardUnreadableOtherSecretRowsMeanNothingRuns)
	run("Guard/ClaimsUnderTwoSecretsThatSeeEachOtherRunOnce", guardClaimsUnderTwoSecretsThatSeeEachOtherRunOnce)
	run("Guard/LaterClaimUnderAnotherSecretYieldsToARunningOne", guardLaterClaimUnderAnotherSecretYieldsToARunningOne)
	run("Guard/StormAcrossARotationRunsTheOperationOnce", guardStormAcrossARotationRunsTheOperationOnce)
	run("Guard/PreviousSecretCostsOneReadOnTheFreshPath", guardPreviousSecretCostsOneReadOnTheFreshPath)
	run("Guard/SecretConfigurationIsValidated", guardSecretConfigurationIsValidated)
	// Streams: DoStream and the stored event sequence (stream_cases.go).
	run("Store/CompleteKeepsTheEventSequenceExactly", storeCompleteKeepsTheEventSequenceExactly)
	run("Guard/StreamRunsOnceAndReplaysTheSameEvents", guardStreamRunsOnceAndReplaysTheSameEvents)
	run("Guard/PlainCompletionStreamsAsItsEnvelope", guardPlainCompletionStreamsAsItsEnvelope)
	run("Guard/StreamFailureMidwayIsRetryable", guardStreamFailureMidwayIsRetryable)
	run("Guard/StreamCallerHangUpStillStores", guardStreamCallerHangUpStillStores)
	run("Guard/StreamFollowerGetsEveryEventLive", guardStreamFollowerGetsEveryEventLive)
	run("Guard/WaitersAreBoundedPerKey", guardWaitersAreBoundedPerKey)
	run("Guard/OversizeStreamIsStoredAsItsEnvelope", guardOversizeStreamIsStoredAsItsEnvelope)
	// Resumable streams: chunk IDs and Last-Event-ID (resume_cases.go).
	run("Guard/StreamResumesAfterTheLastStoredChunk", guardStreamResumesAfterTheLastStoredChunk)
	run("Guard/StreamResumesLiveWithoutWaiting", guardStreamResumesLiveWithoutWaiting)
	run("Guard/StreamResumeNeverCrossesAttempts", guardStreamResumeNeverCrossesAttempts)
	run("Guard/StreamResumeOfARebuiltAnswerRestarts", guardStreamResumeOfARebuiltAnswerRestarts)
	run("Guard/LiveStreamsAreBoundedPerProcess", guardLiveStreamsAreBoundedPerProcess)
	run("Guard/StreamResumeTellsExecutionsOfOneAttemptApart", guardStreamResumeTellsExecutionsOfOneAttemptApart)
	run("Guard/StreamResumesLiveAfterTheLogDroppedItsStart", guardStreamResumesLiveAfterTheLogDroppedItsStart)
	// Audit trail: durable events with their row change, batches, history
	// (audit_cases.go).
	run("Store/AuditedClaimWritesItsEventOnlyWhenItWins", auditClaimWritesItsEventOnlyWhenItWins)
	run("Store/AuditedReclaimsWriteTheirEventOnlyWhenTheyWin", auditReclaimsWriteTheirEventOnlyWhenTheyWin)
	run("Store/AuditedAbandonReleaseAndCancelWriteTheirEventOnlyWhenTheyWin", auditAbandonReleaseAndCancel)
	run("Store/AuditedClaimOutlivesItsRow", auditClaimOutlivesItsRow)
	run("Store/AppendAuditSkipsARepeatedID", auditAppendSkipsARepeatedID)
	run("Store/AppendAuditTalliesReadOnlyDecisionsPerActor", auditTalliesReadOnlyDecisions)
	run("Store/AppendAuditAddsCallersTallies", auditAppendAddsCallersTallies)
	run("Store/HistoryFiltersOrdersAndLimits", auditHistoryFiltersOrdersAndLimits)
	run("Store/AuditTimesRoundTripToTheMicrosecondInUTC", auditTimesRoundTrip)
	run("Store/BrokenStoreFailsAuditReadsAndWrites", auditBrokenStoreFails)
}

// Secret is the HMAC secret the suite's guards use.
var Secret = []byte("storetest-secret-0123456789abcdef-0123")

type guardOpt func(*idemguard.Config)

func newGuard(t testing.TB, h *Harness, opts ...guardOpt) (*idemguard.Guard, *testlog.Buffer) {
	logs := &testlog.Buffer{Mirror: t}
	cfg := idemguard.Config{
		Store:  h.Store,
		Secret: Secret,
		Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	for _, o := range opts {
		o(&cfg)
	}
	g, err := idemguard.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, g.Close(ctx))
	})
	return g, logs
}

func withSecret(s []byte) guardOpt { return func(c *idemguard.Config) { c.Secret = s } }
func withoutCache() guardOpt       { return func(c *idemguard.Config) { c.ReplayCacheSize = -1 } }
func withHeartbeat(d time.Duration) guardOpt {
	return func(c *idemguard.Config) { idemguardtest.SetHeartbeatEvery(c, d) }
}
func withObserver(f func(idemguard.Event)) guardOpt {
	return func(c *idemguard.Config) { c.Observe = f }
}

func ctxFor(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// counter is an operation that counts its runs and returns a fixed envelope.
type counter struct {
	mu   sync.Mutex
	runs int
}

func (c *counter) n() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runs
}

func (c *counter) op(value any, err error) idemguard.Operation {
	return func(context.Context) (any, error) {
		c.mu.Lock()
		c.runs++
		c.mu.Unlock()
		return value, err
	}
}

// requireReplay calls g.Do(c, op) again and requires the stored answer of
// first back, marked cached.
func requireReplay(t testing.TB, g *idemguard.Guard, c idemguard.Call, op idemguard.Operation, first idemguard.Result) {
	t.Helper()
	again, err := g.Do(ctxFor(t), c, op)
	require.NoError(t, err)
	require.True(t, again.Cached, "a replay of the stored answer")
	sameExceptCached(t, first.Body, again.Body)
}

// sameExceptCached asserts a replay body equals the first body byte for byte
// once "cached" is set back to false.
func sameExceptCached(t testing.TB, first, replay []byte) {
	t.Helper()
	require.Contains(t, string(first), `"cached":false`)
	require.Contains(t, string(replay), `"cached":true`)
	require.Equal(t, string(first), string(bytes.Replace(replay, []byte(`"cached":true`), []byte(`"cached":false`), 1)))
}

func mustJSON(t testing.TB, v any) json.RawMessage {
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}
