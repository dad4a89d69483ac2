package config

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"time"
)

// Day is the unit "d" of [ParseDuration]: 24 hours (a calendar day may differ by a DST hour;
// every time in idemguard is UTC).
const Day = 24 * time.Hour

// ParseDuration parses a duration like time.ParseDuration does, and also whole or fractional
// days written first: "7d", "1d12h", "1.5d". It is the one parser of every duration idemguard
// reads, in the config file and on the command line (stats --since), so both accept the same.
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	neg := false
	body := s
	if rest, ok := strings.CutPrefix(body, "-"); ok {
		neg, body = true, rest
	} else {
		body = strings.TrimPrefix(body, "+")
	}
	days, rest, hasDays := strings.Cut(body, "d")
	if !hasDays {
		return time.ParseDuration(s)
	}
	n, err := strconv.ParseFloat(days, 64)
	if err != nil || days == "" || strings.ContainsAny(days, "eE+-xXpP_") || math.IsInf(n, 0) || math.IsNaN(n) {
		return 0, errors.New("config: invalid duration " + strconv.Quote(s) + ": days (d) come first, as a number: 7d, 1d12h, 1.5d")
	}
	if n*float64(Day) > float64(math.MaxInt64) {
		return 0, errors.New("config: invalid duration " + strconv.Quote(s) + ": too long")
	}
	d := time.Duration(n * float64(Day))
	if rest != "" {
		r, err := time.ParseDuration(rest)
		if err != nil || strings.HasPrefix(rest, "-") || strings.HasPrefix(rest, "+") {
			return 0, errors.New("config: invalid duration " + strconv.Quote(s) + ": after the days, hours and smaller units: 1d12h")
		}
		if d > math.MaxInt64-r {
			return 0, errors.New("config: invalid duration " + strconv.Quote(s) + ": too long")
		}
		d += r
	}
	if neg {
		d = -d
	}
	return d, nil
}
