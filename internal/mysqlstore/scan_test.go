package mysqlstore

import (
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Get scans getSQL's columns by position into row.dest(): the two lists must
// name the same columns in the same order (the struct's db tags name them).
// A swapped pair of same-typed columns (two hashes, two times) would scan
// without an error, so the order is checked here, not left to Scan.
func TestGetScansEveryColumn(t *testing.T) {
	sel := regexp.MustCompile(`(?s)^SELECT (.*)\sFROM `).FindStringSubmatch(getSQL)
	require.NotNil(t, sel, "getSQL is a SELECT … FROM")
	var cols []string
	for _, c := range strings.Split(sel[1], ",") {
		c = strings.TrimSpace(c)
		if _, alias, ok := strings.Cut(c, " AS "); ok {
			c = alias
		}
		cols = append(cols, c)
	}

	var r row
	rv := reflect.ValueOf(&r).Elem()
	byAddr := map[uintptr]string{}
	for i := range rv.NumField() {
		byAddr[rv.Field(i).Addr().Pointer()] = rv.Type().Field(i).Tag.Get("db")
	}
	var tags []string
	for _, d := range r.dest() {
		tags = append(tags, byAddr[reflect.ValueOf(d).Pointer()])
	}
	require.Equal(t, cols, tags)
	require.Len(t, tags, rv.NumField(), "every field of row is scanned")
}
