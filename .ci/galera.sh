#!/usr/bin/env bash
# A throwaway 3-node MariaDB Galera cluster on loopback, for integration/galera_test.go.
#
# Usage: .ci/galera.sh start|stop|status|dsns
#
#   start   Start the cluster if it is not already running (idempotent). A cluster that is only
#           partly up, or stopped, is wiped and started fresh: its data is test data. Bootstraps
#           node 1 with --wsrep-new-cluster, then joins nodes 2 and 3 (state transfer by rsync).
#           Every wait is bounded; on failure it prints the failing node's error log and exits 1.
#   stop    Shut every node down (bounded wait, then SIGKILL) and remove the data directory.
#   status  Print each node's state; exit 0 only when all three are synced in one cluster of 3.
#   start-node N
#           Start node N of a running cluster again after it was shut down (a test's fault: it
#           rejoins its cluster by incremental state transfer) and wait until all three are
#           synced in one cluster of 3. A node that is running is left alone.
#   dsns    Print the comma-separated Go DSNs of the three nodes (what IDEMGUARD_TEST_GALERA_DSNS
#           holds).
#
# It never touches the main MariaDB (3306, /run/mysqld): every node has its own defaults file
# (--defaults-file, so /etc/mysql is not read), datadir, socket and pid file under
# $IDEMGUARD_GALERA_DIR (default /tmp/idemguard-galera). Ports, all on 127.0.0.1:
#
#   node   SQL     Galera group   IST     SST (rsync)
#   1      23306   24567          24577   24587
#   2      23307   24568          24578   24588
#   3      23308   24569          24579   24589
#
# Needs: mariadb-server, galera-4, rsync (.ci/run installs the last two when missing).
set -euo pipefail

DIR="${IDEMGUARD_GALERA_DIR:-/tmp/idemguard-galera}"
PROVIDER="${IDEMGUARD_GALERA_PROVIDER:-/usr/lib/galera/libgalera_smm.so}"
NODES=(1 2 3)
START_TIMEOUT="${IDEMGUARD_GALERA_START_TIMEOUT:-60}" # seconds per node
STOP_TIMEOUT=30

# The user the nodes run as. Not root: the joiner's rsync daemon, started as root, drops to
# "nobody" and cannot write the datadir. As root we run the nodes as mysql (Debian's package user).
if [ "$(id -u)" -eq 0 ] && id mysql >/dev/null 2>&1; then
	RUN_AS=mysql
else
	RUN_AS="$(id -un)"
fi

sql_port() { echo $((23305 + $1)); }
gcomm_port() { echo $((24566 + $1)); }
ist_port() { echo $((24576 + $1)); }
sst_port() { echo $((24586 + $1)); }
node_dir() { echo "$DIR/node$1"; }
sock() { echo "$DIR/node$1/mysqld.sock"; }
pidfile() { echo "$DIR/node$1/mysqld.pid"; }
cnf() { echo "$DIR/node$1.cnf"; }
errlog() { echo "$DIR/node$1.err"; }

log() { printf '== galera: %s\n' "$*" >&2; }
die() {
	printf '== galera: ERROR: %s\n' "$*" >&2
	exit 1
}

# q N SQL: run SQL on node N over its socket as root, tab-separated, no headers.
q() { mariadb --no-defaults -uroot -S "$(sock "$1")" --connect-timeout=2 -N -B -e "$2" 2>/dev/null; }

# wsrep N VAR: a wsrep status variable of node N ("" when the node does not answer).
wsrep() { q "$1" "SHOW GLOBAL STATUS LIKE '$2'" | cut -f2 || true; }

synced() { [ "$(wsrep "$1" wsrep_local_state_comment)" = "Synced" ]; }

running_pid() {
	local f
	f="$(pidfile "$1")"
	[ -s "$f" ] || return 1
	local pid
	pid="$(cat "$f")"
	kill -0 "$pid" 2>/dev/null || return 1
	echo "$pid"
}

all_up() {
	local n
	for n in "${NODES[@]}"; do
		synced "$n" || return 1
		[ "$(wsrep "$n" wsrep_cluster_size)" = "3" ] || return 1
	done
}

dsns() {
	local out="" n
	for n in "${NODES[@]}"; do
		out+="${out:+,}root@tcp(127.0.0.1:$(sql_port "$n"))/test"
	done
	echo "$out"
}

check_prereqs() {
	command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ] || die "mariadbd not found (apt-get install mariadb-server)"
	command -v mariadb-install-db >/dev/null 2>&1 || die "mariadb-install-db not found (apt-get install mariadb-server)"
	[ -r "$PROVIDER" ] || die "Galera provider $PROVIDER not found (apt-get install galera-4)"
	command -v rsync >/dev/null 2>&1 || die "rsync not found (apt-get install rsync); the joiners' state transfer uses it"
	local n p
	for n in "${NODES[@]}"; do
		for p in "$(sql_port "$n")" "$(gcomm_port "$n")" "$(ist_port "$n")" "$(sst_port "$n")"; do
			if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
				die "port $p on 127.0.0.1 is taken by another process; stop it (or .ci/galera.sh stop) first"
			fi
		done
	done
}

write_cnf() {
	local n="$1" peers="" m
	for m in "${NODES[@]}"; do
		peers+="${peers:+,}127.0.0.1:$(gcomm_port "$m")"
	done
	cat >"$(cnf "$n")" <<EOF
[mysqld]
user                     = $RUN_AS
datadir                  = $(node_dir "$n")
socket                   = $(sock "$n")
pid-file                 = $(pidfile "$n")
log-error                = $(errlog "$n")
bind-address             = 127.0.0.1
port                     = $(sql_port "$n")
# Small and quick: test data only.
innodb_buffer_pool_size  = 64M
innodb_log_file_size     = 16M
innodb_flush_log_at_trx_commit = 2
max_connections          = 500
skip-log-bin
# What Galera requires.
binlog_format            = ROW
default_storage_engine   = InnoDB
innodb_autoinc_lock_mode = 2
wsrep_on                 = ON
wsrep_provider           = $PROVIDER
wsrep_cluster_name       = idemguard_test
wsrep_cluster_address    = gcomm://$peers
wsrep_node_name          = node$n
wsrep_node_address       = 127.0.0.1:$(gcomm_port "$n")
wsrep_provider_options   = "gmcast.listen_addr=tcp://127.0.0.1:$(gcomm_port "$n");ist.recv_addr=127.0.0.1:$(ist_port "$n");gcache.size=32M;gcs.fc_limit=256"
wsrep_sst_method         = rsync
wsrep_sst_receive_address = 127.0.0.1:$(sst_port "$n")
wsrep_slave_threads      = 2
EOF
}

# wait_synced N: wait until node N is Synced, or fail with its log.
wait_synced() {
	local n="$1" pid="$2" deadline=$((SECONDS + START_TIMEOUT))
	until synced "$n"; do
		if ! kill -0 "$pid" 2>/dev/null; then
			tail -n 40 "$(errlog "$n")" >&2 || true
			die "node $n (mariadbd pid $pid) exited during startup; its log is $(errlog "$n")"
		fi
		if [ "$SECONDS" -ge "$deadline" ]; then
			tail -n 40 "$(errlog "$n")" >&2 || true
			die "node $n not Synced within ${START_TIMEOUT}s; its log is $(errlog "$n")"
		fi
		sleep 0.5
	done
}

start_node() {
	local n="$1"
	shift
	write_cnf "$n"
	# setsid: the node outlives this script and the CI job's process group signals.
	setsid mariadbd --defaults-file="$(cnf "$n")" "$@" </dev/null >>"$(errlog "$n")" 2>&1 &
	local pid=$!
	wait_synced "$n" "$pid"
	log "node $n synced (127.0.0.1:$(sql_port "$n"), pid $pid)"
}

stop_all() {
	local n pid pids=()
	for n in "${NODES[@]}"; do
		if pid="$(running_pid "$n")"; then
			kill -TERM "$pid" 2>/dev/null || true
			pids+=("$pid")
		fi
	done
	local deadline=$((SECONDS + STOP_TIMEOUT))
	for pid in "${pids[@]}"; do
		while kill -0 "$pid" 2>/dev/null; do
			if [ "$SECONDS" -ge "$deadline" ]; then
				log "mariadbd pid $pid did not stop within ${STOP_TIMEOUT}s; killing it"
				kill -KILL "$pid" 2>/dev/null || true
				break
			fi
			sleep 0.2
		done
	done
	# Only ever remove our own directory: it must hold our node layout.
	if [ -d "$DIR" ] && { [ -e "$DIR/node1.cnf" ] || [ -d "$DIR/node1" ]; }; then
		rm -rf "$DIR"
	fi
}

cmd_start() {
	if all_up; then
		log "already running: $(dsns)"
		return 0
	fi
	if [ -d "$DIR" ]; then
		log "a previous cluster in $DIR is not fully up; wiping it and starting fresh"
		stop_all
	fi
	check_prereqs
	local t0=$SECONDS
	mkdir -p "$DIR"
	# Node 1 gets system tables; 2 and 3 start empty and receive node 1's datadir by rsync SST.
	# root@localhost with an empty password and no unix_socket plugin, so that Go connects over TCP.
	mariadb-install-db --no-defaults --user="$RUN_AS" --datadir="$(node_dir 1)" \
		--auth-root-authentication-method=normal --skip-test-db >"$DIR/install-db.log" 2>&1 ||
		{
			cat "$DIR/install-db.log" >&2
			die "mariadb-install-db failed"
		}
	mkdir -p "$(node_dir 2)" "$(node_dir 3)"
	[ "$RUN_AS" = "$(id -un)" ] || chown -R "$RUN_AS" "$DIR"
	start_node 1 --wsrep-new-cluster
	q 1 "CREATE USER IF NOT EXISTS 'root'@'127.0.0.1'; GRANT ALL ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION; CREATE DATABASE IF NOT EXISTS test" ||
		die "could not create root@127.0.0.1 on node 1"
	start_node 2
	start_node 3
	all_up || die "the nodes are up but not one synced cluster of 3 (see .ci/galera.sh status)"
	log "cluster of 3 up in $((SECONDS - t0))s: $(dsns)"
}

cmd_start_node() {
	local n="${1:-}"
	case "$n" in
	1 | 2 | 3) ;;
	*) die "start-node: name a node, 1, 2 or 3" ;;
	esac
	[ -e "$(cnf "$n")" ] || die "start-node: no cluster in $DIR (start one with $0 start)"
	if ! running_pid "$n" >/dev/null; then
		start_node "$n"
	fi
	local deadline=$((SECONDS + START_TIMEOUT))
	until all_up; do
		[ "$SECONDS" -lt "$deadline" ] || die "node $n is up but the nodes are not one synced cluster of 3 within ${START_TIMEOUT}s"
		sleep 0.5
	done
}

cmd_status() {
	local n ok=0
	for n in "${NODES[@]}"; do
		local state size
		state="$(wsrep "$n" wsrep_local_state_comment)"
		size="$(wsrep "$n" wsrep_cluster_size)"
		printf 'node%s 127.0.0.1:%s state=%s cluster_size=%s\n' "$n" "$(sql_port "$n")" "${state:-down}" "${size:--}"
		if [ "$state" != "Synced" ] || [ "$size" != "3" ]; then
			ok=1
		fi
	done
	return "$ok"
}

case "${1:-}" in
start) cmd_start ;;
stop)
	stop_all
	log "stopped"
	;;
status) cmd_status ;;
start-node) cmd_start_node "${2:-}" ;;
dsns) dsns ;;
*)
	echo "usage: $0 start|stop|status|dsns|start-node N" >&2
	exit 2
	;;
esac
