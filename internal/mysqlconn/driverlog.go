package mysqlconn

import (
	"fmt"
	"log/slog"
	"strings"

	"github.com/go-sql-driver/mysql"
)

// DriverLogger adapts an slog.Logger to go-sql-driver/mysql's Logger, so that the driver's own
// lines ("[mysql] packets.go:58 unexpected EOF", written as plain text to stderr by default) are
// JSON records in the service's log stream like every other line: level WARN, message
// "mysqlconn: driver", the driver's text in driver_msg and its source position in
// driver_source.
type DriverLogger struct{ Logger *slog.Logger }

var _ mysql.Logger = DriverLogger{}

// Print implements mysql.Logger.
func (d DriverLogger) Print(v ...any) {
	for _, a := range v {
		if err, ok := a.(error); ok && isInterrupted(err) {
			return // a statement its caller's context ended: the caller has the error
		}
	}
	msg := strings.TrimSpace(fmt.Sprint(v...))
	attrs := []any{}
	// The driver prefixes "file.go:line " to what it logs from a connection.
	if src, rest, ok := strings.Cut(msg, " "); ok && strings.Contains(src, ".go:") {
		attrs = append(attrs, slog.String("driver_source", src))
		msg = strings.TrimSpace(rest)
	}
	attrs = append(attrs, slog.String("driver_msg", msg))
	d.Logger.Warn("mysqlconn: driver", attrs...)
}

// LogDriverTo routes the driver's log lines to l for the whole process. Call it once at start,
// before the first connection is configured: the driver copies its logger into each DSN's
// configuration when the DSN is parsed, and its setter is not synchronized.
func LogDriverTo(l *slog.Logger) {
	_ = mysql.SetLogger(DriverLogger{Logger: l}) // errors only for a nil logger
}
