package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/idemguard/idemguard/internal/stats"
)

const statsSecretsUsage = `usage: idemguard stats secrets [flags]

Counts the live rows of idempotency_keys per secret id (database clock): rows not yet
expired, and started rows. A secret rotated out of IDEMPOTENCY_SECRET may be removed from
IDEMPOTENCY_PREVIOUS_SECRETS once its id holds no live row (docs/OPERATIONS.md, "Rotating
the secret"). "(unnamed)" is the secret of rows made without IDEMPOTENCY_SECRET_ID.

Exit status: 0 counted, 2 bad flags or a malformed DSN, 3 the rows could not be read.

flags:
`

// runStatsSecrets implements `idemguard stats secrets`.
func runStatsSecrets(ctx context.Context, e env, args []string) int {
	fs := newFlagSet(e, "stats secrets", statsSecretsUsage)
	dsnFlag := fs.String("dsn", "", "MySQL DSN, user:password@tcp(host:3306)/dbname (default $"+EnvMySQLDSN+")")
	asJSON := fs.Bool("json", false, "print one JSON object instead of a table")
	if code, ok := parseFlagsOnly(e, fs, args); !ok {
		return code
	}
	db, log, code := openDB(ctx, e, "stats secrets", *dsnFlag, 1, exitUnreadable)
	if db == nil {
		return code
	}
	defer db.Close()
	rows, now, err := stats.CollectSecretRows(ctx, db)
	if err != nil {
		log.ErrorContext(ctx, "stats: count rows per secret id", "err", err)
		return exitUnreadable
	}
	if *asJSON {
		if rows == nil {
			rows = []stats.SecretRows{}
		}
		b, err := json.Marshal(struct {
			Now     time.Time          `json:"now"`
			Secrets []stats.SecretRows `json:"secrets"`
		}{now, rows})
		if err == nil {
			_, err = fmt.Fprintln(e.stdout, string(b))
		}
		if err != nil {
			log.ErrorContext(ctx, "stats: write the report", "err", err)
			return exitUnreadable
		}
		return exitOK
	}
	writeSecretRows(e.stdout, rows, now)
	return exitOK
}

func writeSecretRows(w io.Writer, rows []stats.SecretRows, now time.Time) {
	const stamp = "2006-01-02 15:04:05Z"
	fmt.Fprintf(w, "idemguard stats secrets: live rows per secret id at %s (database clock, UTC)\n\n", now.Format(stamp))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SECRET ID\tLIVE ROWS\tSTARTED\tLAST EXPIRES")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", secretIDLabel(r.SecretID), r.Live, r.Started, r.LastExpires.Format(stamp))
	}
	_ = tw.Flush()
	if len(rows) == 0 {
		fmt.Fprintln(w, "(no live rows)")
	}
}

// secretIDLabel is how an id is shown to an operator.
func secretIDLabel(id string) string {
	if id == "" {
		return "(unnamed)"
	}
	return id
}
