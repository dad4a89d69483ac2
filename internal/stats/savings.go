package stats

import (
	"math"
	"sync/atomic"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/mysqlstore"
)

// Savings are what the guard did and saved for one tenant's scope: the executions it ran, and
// the calls, tokens and cost that replays did not spend again. CostNanos is in billionths of
// the currency of the scope's prices (0 without prices).
type Savings struct {
	Executions              int64 `json:"executions" db:"executions"`
	AvoidedCalls            int64 `json:"avoided_calls" db:"avoided_calls"`
	AvoidedPromptTokens     int64 `json:"avoided_prompt_tokens" db:"avoided_prompt_tokens"`
	AvoidedCompletionTokens int64 `json:"avoided_completion_tokens" db:"avoided_completion_tokens"`
	AvoidedCostNanos        int64 `json:"avoided_cost_nanos" db:"avoided_cost_nanos"`
}

// SavingsKey names the (tenant, scope) a Savings row counts.
type SavingsKey = mysqlstore.SavingsKey

// OverflowTenant is the tenant savings are counted under once MaxScopes (tenant, scope) pairs
// are counted separately; no tenant ID can have parentheses.
const OverflowTenant = "(other)"

const numSavings = 5

func (s *Savings) ptrs() [numSavings]*int64 {
	return [numSavings]*int64{&s.Executions, &s.AvoidedCalls, &s.AvoidedPromptTokens,
		&s.AvoidedCompletionTokens, &s.AvoidedCostNanos}
}

func (s Savings) isZero() bool { return s == Savings{} }

type savingsCounters [numSavings]atomic.Int64

// observeSavings counts an execution, or a replay and what it avoided.
func (r *Recorder) observeSavings(e idemguard.Event) {
	switch e.Kind {
	case idemguard.EventOperation:
		r.savingsOf(e.Tenant, e.Scope)[0].Add(1)
	case idemguard.EventReplayed:
		c := r.savingsOf(e.Tenant, e.Scope)
		c[1].Add(1)
		c[2].Add(e.Usage.PromptTokens)
		c[3].Add(e.Usage.CompletionTokens)
		if r.opts.Cost != nil {
			if cost := r.opts.Cost(e.Scope, e.Usage); cost > 0 {
				c[4].Add(int64(math.Round(cost * 1e9)))
			}
		}
	}
}

func (r *Recorder) savingsOf(tenant, scope string) *savingsCounters {
	k := SavingsKey{Tenant: tenant, Scope: scope}
	if v, ok := r.savings.Load(k); ok {
		return v.(*savingsCounters)
	}
	if r.numSavings.Load() >= int64(r.opts.MaxScopes) {
		k = SavingsKey{Tenant: OverflowTenant, Scope: OverflowScope}
		if v, ok := r.savings.Load(k); ok {
			return v.(*savingsCounters)
		}
	}
	v, loaded := r.savings.LoadOrStore(k, new(savingsCounters))
	if !loaded {
		r.numSavings.Add(1)
	}
	return v.(*savingsCounters)
}

// takeSavings swaps every savings counter to zero and returns what it held.
func (r *Recorder) takeSavings() (map[SavingsKey]Savings, map[SavingsKey]*savingsCounters) {
	deltas := map[SavingsKey]Savings{}
	taken := map[SavingsKey]*savingsCounters{}
	r.savings.Range(func(k, v any) bool {
		cs := v.(*savingsCounters)
		var s Savings
		p := s.ptrs()
		for i := range cs {
			*p[i] = cs[i].Swap(0)
		}
		if !s.isZero() {
			deltas[k.(SavingsKey)] = s
			taken[k.(SavingsKey)] = cs
		}
		return true
	})
	return deltas, taken
}

// giveBack adds savings a failed flush took back to their counters.
func giveBack(deltas map[SavingsKey]Savings, taken map[SavingsKey]*savingsCounters) {
	for k, s := range deltas {
		p := s.ptrs()
		for i := range taken[k] {
			taken[k][i].Add(*p[i])
		}
	}
}

// PendingSavings returns the savings observed and not yet flushed.
func (r *Recorder) PendingSavings() map[SavingsKey]Savings {
	out := map[SavingsKey]Savings{}
	r.savings.Range(func(k, v any) bool {
		var s Savings
		p := s.ptrs()
		for i := range v.(*savingsCounters) {
			*p[i] = v.(*savingsCounters)[i].Load()
		}
		if !s.isZero() {
			out[k.(SavingsKey)] = s
		}
		return true
	})
	return out
}

// values are s's counters in mysqlstore.SavingsColumns' order.
func (s Savings) values() []int64 {
	out := make([]int64, 0, numSavings)
	for _, p := range s.ptrs() {
		out = append(out, *p)
	}
	return out
}
