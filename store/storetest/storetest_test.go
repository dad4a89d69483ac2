package storetest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCaseNamesAreUnique walks the case list without a store: a name listed
// twice would make t.Run run the second case as name#01.
func TestCaseNamesAreUnique(t *testing.T) {
	var names []string
	cases(uniqueNames(t, func(name string, _ caseFunc) { names = append(names, name) }))
	require.NotEmpty(t, names)
	for _, name := range names {
		require.True(t, strings.HasPrefix(name, "Store/") || strings.HasPrefix(name, "Guard/"), name)
	}
}

// errorRecorder is a testing.TB that records Errorf instead of failing.
type errorRecorder struct {
	testing.TB
	errs []string
}

func (r *errorRecorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func TestUniqueNamesReportsARepeat(t *testing.T) {
	rec := &errorRecorder{TB: t}
	var ran int
	run := uniqueNames(rec, func(string, caseFunc) { ran++ })
	run("Store/A", nil)
	run("Guard/A", nil)
	require.Empty(t, rec.errs)
	run("Store/A", nil)
	require.Equal(t, []string{`storetest: two cases are named "Store/A"`}, rec.errs)
	require.Equal(t, 3, ran, "a repeat is reported, not skipped")
}
