// Package faults is idemguard's fault-injection suite: guards in
// this process talk to a real MySQL/MariaDB through a faulttest.Proxy that
// drops connections, blackholes them, adds latency and cuts a connection
// right after a statement was sent, while a faulttest.Recorder records when
// each execution of each key ran. The tests prove the guarantee at its
// edges, where the owner stops before its lease runs out and every write
// whose outcome is unknown is decided by re-reading the row: executions of
// a key never overlap, a caller told "nothing ran" leaves no claim behind,
// error 1213 is decided by the row, and a paid-for result survives a
// database blip at commit time.
//
//	IDEMGUARD_TEST_MYSQL_DSN='root@tcp(127.0.0.1:3306)/test' go test -race -count=1 ./integration/faults/
package faults
