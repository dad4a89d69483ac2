// Package integration holds idemguard's end-to-end tests: they build the
// idemguard binary once, start `idemguard serve` processes against a fresh MySQL database each
// (internal/testdb), with a loopback fake OpenAI-compatible upstream that counts its calls, and
// drive them over HTTP. Run them with
//
//	IDEMGUARD_TEST_MYSQL_DSN='root@tcp(127.0.0.1:3306)/test' go test -race -count=1 ./integration/
//
// Without a MySQL server they skip (or fail when CI=true), like every MySQL-backed test.
package integration
