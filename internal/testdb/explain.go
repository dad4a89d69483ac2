package testdb

import (
	"testing"

	"github.com/jmoiron/sqlx"
)

// Explain returns MySQL's plan for query (EXPLAIN, traditional format): one map per row of the
// plan, column name → value as text ("" for NULL). Tests check the "key", "type" and "Extra"
// columns to prove that a statement uses an index.
func Explain(t testing.TB, db *sqlx.DB, query string, args ...any) []map[string]string {
	t.Helper()
	rows, err := db.QueryxContext(t.Context(), "EXPLAIN "+query, args...)
	if err != nil {
		t.Fatalf("testdb: EXPLAIN: %v", err)
	}
	defer rows.Close()
	var plans []map[string]string
	for rows.Next() {
		m := map[string]any{}
		if err := rows.MapScan(m); err != nil {
			t.Fatalf("testdb: EXPLAIN: %v", err)
		}
		p := make(map[string]string, len(m))
		for k, v := range m {
			switch v := v.(type) {
			case []byte:
				p[k] = string(v)
			case string:
				p[k] = v
			}
		}
		plans = append(plans, p)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("testdb: EXPLAIN: %v", err)
	}
	return plans
}
