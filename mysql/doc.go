// Package mysql is idemguard's MySQL store: MySQL 8, MariaDB 10.11+ and TiDB.
// It keeps the database driver, sqlx and goose out of package idemguard, so a
// program that guards with the in-memory store (package store/memstore) links none of them.
//
//	db, err := mysql.Open(ctx, dsn, mysql.PoolConfig{})
//	if err != nil { ... }
//	if err := mysql.Migrate(ctx, db); err != nil { ... }
//	guard, err := idemguard.New(idemguard.Config{Store: mysql.NewStore(db), Secret: secret})
//
// The store holds every key in one table, idempotency_keys; ownership of a
// row is decided only by the claim INSERT (the unique key lets one caller
// win) and by UPDATEs guarded by the claim nonce, whose affected-row count
// says who won.
//
// Every statement on the tables (idempotency_keys, idempotency_audit,
// idempotency_audit_tally, idempotency_stats, idempotency_savings), those of the store and those the
// idemguard binary's cleanup, stats and operator page run, lives in one
// internal package that this one wraps; this package exports only what a
// program that guards with MySQL needs.
package mysql
