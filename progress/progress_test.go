package progress_test

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/internal/progresshook"
	"github.com/idemguard/idemguard/progress"
)

func TestFractionIsThousandthsClamped(t *testing.T) {
	t.Parallel()
	require.Equal(t, progress.Update{Done: 420, Total: 1000, Stage: "w"}, progress.Fraction(0.42, "w"))
	require.Equal(t, int64(0), progress.Fraction(-1, "").Done)
	require.Equal(t, int64(1000), progress.Fraction(7, "").Done)
	require.Equal(t, int64(0), progress.Fraction(math.NaN(), "").Done)
}

func TestReportReachesTheSinkOrNothing(t *testing.T) {
	t.Parallel()
	progress.Report(context.Background(), progress.Update{Done: 1}) // no guard: nothing happens
	var got []progress.Update
	ctx := progresshook.With(context.Background(), progresshook.Func(func(done, total int64, stage string) {
		got = append(got, progress.Update{Done: done, Total: total, Stage: stage})
	}))
	progress.Report(ctx, progress.Update{Done: 2, Total: 5, Stage: "reading"})
	require.Equal(t, []progress.Update{{Done: 2, Total: 5, Stage: "reading"}}, got)
}
