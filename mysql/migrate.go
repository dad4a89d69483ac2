package mysql

import (
	"context"
	"database/sql"

	"github.com/idemguard/idemguard/internal/dbmigrate"
)

// Migrate applies idemguard's pending migrations to db (the same ones as
// `idemguard migrate up`). Concurrent runs, from any number of processes, are
// serialized with a MySQL named lock, so every replica may call it at start.
//
// Teams that run their own goose apply the embedded files of package
// github.com/idemguard/idemguard/migrations instead (migrations.FS, goose SQL
// files at its root, one DDL statement each), e.g. with
// goose.NewProvider(goose.DialectMySQL, db, migrations.FS); they then
// serialize concurrent runs themselves.
func Migrate(ctx context.Context, db *sql.DB) error {
	return dbmigrate.Up(ctx, db)
}
