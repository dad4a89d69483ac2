// Package migrations holds idemguard's goose SQL migrations, embedded into the binary.
//
// Rules for new migrations:
//   - File name: NNNNN_snake_case_description.sql. The numbers rise but are not
//     consecutive (some are skipped); a new file takes a number above every one here, since
//     goose refuses to apply a version below one a database already has, and a
//     committed file is never renumbered.
//   - Exactly ONE DDL statement per direction per file. MySQL and MariaDB commit DDL implicitly,
//     so a file with two DDL statements that fails halfway can neither be rolled back nor re-run.
//   - Times are DATETIME(6) in UTC, never TIMESTAMP.
//   - Every migration has a Down section and is tested up → down → up (see internal/dbmigrate).
//
// Apply them with `idemguard migrate up` or mysql.Migrate, which serialize concurrent runs
// across replicas with a MySQL named lock. A team with its own goose setup may apply FS itself,
// e.g. goose.NewProvider(goose.DialectMySQL, db, migrations.FS); it must then serialize
// concurrent runs (goose's session locker, or one migrating job per deploy). A test applies FS
// with a plain goose provider.
package migrations

import "embed"

// FS holds every *.sql migration in this directory, at its root.
//
//go:embed *.sql
var FS embed.FS
