package main

import (
	"os"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// The exit statuses README documents for stats and for bad configuration are
// the ones the commands return: a cron job or CI alerting on them must not be
// told one thing and handed another.
func TestDocumentedExitStatusesAreTheCodes(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	readme := string(b)

	m := regexp.MustCompile(`exit (\d) healthy, (\d) a threshold breached, (\d) bad flags or DSN, (\d) figures unreadable`).FindStringSubmatch(readme)
	require.NotNil(t, m, "README's stats example names its exit statuses")
	for i, want := range []int{exitOK, exitBreach, exitUsage, exitUnreadable} {
		got, _ := strconv.Atoi(m[i+1])
		require.Equal(t, want, got, "README: %q", m[0])
	}
	m = regexp.MustCompile(`tells a breach \((\d)\) from a check that could\s+not read the figures \((\d)\)`).FindStringSubmatch(readme)
	require.NotNil(t, m, "README's stats section names breach and unreadable statuses")
	require.Equal(t, strconv.Itoa(exitBreach), m[1])
	require.Equal(t, strconv.Itoa(exitUnreadable), m[2])
	m = regexp.MustCompile(`refuses to start \(exit (\d)\)`).FindStringSubmatch(readme)
	require.NotNil(t, m, "README names the exit status of a bad configuration")
	require.Equal(t, strconv.Itoa(exitUsage), m[1])
}
