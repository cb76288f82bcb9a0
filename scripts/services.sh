#!/usr/bin/env bash
# services.sh starts the real servers timeoutmill's tests use (RabbitMQ, PostgreSQL 15, MariaDB,
# Redis 7, NATS 2.15 with JetStream, and Shopify's toxiproxy, the fault proxy of the network-fault
# tests), each bound to 127.0.0.1 on a non-default port, from a plain shell as root: no Docker, no
# systemd. It installs what is missing with apt-get (NATS and toxiproxy with a pinned `go install`,
# so `go` must be on PATH), so a fresh Debian 12 machine (CI) needs nothing else.
#
#   scripts/services.sh up     [rabbitmq|postgres|mariadb|redis|nats|toxiproxy ...]   install, start, wait, create test db/user
#   scripts/services.sh down   [rabbitmq|postgres|mariadb|redis|nats|toxiproxy ...]   stop cleanly
#   scripts/services.sh status                                                        what runs
#   scripts/services.sh env                                                           print the env file for tests
#
#   scripts/services.sh cluster up|down|status [1|2|3 ...]          a 3-node RabbitMQ cluster (below)
#   scripts/services.sh pg-replica up|down|status|promote [sync|async]   a PostgreSQL primary and standby (below)
#   scripts/services.sh nats-cluster up|down|status [1|2|3 ...]     a 3-server NATS JetStream cluster (below)
#
# No name means all six. `up` is idempotent: a server that already answers is left alone (a second
# start would break a running RabbitMQ or MariaDB, see shared/design/SERVICES.md).
#
# Environment: TIMEOUTMILL_SERVICES_DIR (state dir, default /tmp/timeoutmill-services; every parent
# must be traversable by user postgres), TIMEOUTMILL_RABBITMQ_PORT (5682; the Erlang distribution
# port is this + 20000), TIMEOUTMILL_POSTGRES_PORT (5442), TIMEOUTMILL_MARIADB_PORT (3316),
# TIMEOUTMILL_REDIS_PORT (6389), TIMEOUTMILL_NATS_PORT (4232), TIMEOUTMILL_TOXIPROXY_PORT (8484,
# its HTTP API; the proxies tests create listen on ports of their own),
# TIMEOUTMILL_RABBITMQ_NODENAME (timeoutmill@localhost), TIMEOUTMILL_INSTALL_DIR (where
# nats-server is built with `go install`; default the state dir).
#
# `cluster` runs three RabbitMQ nodes joined in one cluster, for the cluster acceptance test: node N
# listens on TIMEOUTMILL_CLUSTER_PORT + N - 1 (base 5692; distribution ports + 20000), is named
# ${TIMEOUTMILL_CLUSTER_NAME:-tmcluster}N@localhost and lives in $TIMEOUTMILL_SERVICES_DIR/cluster/nodeN.
# `cluster up` starts the nodes (all, or those named by number) and joins nodes 2 and 3 to node 1
# once; a node stopped with `cluster down N` rejoins by itself when started again. The nodes share
# one Erlang cookie, written into each node's HOME. `make test` does not start it: the test does.
#
# `pg-replica` runs a PostgreSQL primary on TIMEOUTMILL_PG_REPLICA_PORT (5452) and a streaming standby
# on that + 1, in $TIMEOUTMILL_SERVICES_DIR/pg-replica, for failover drills. `up` builds the pair
# (again, when its standby was promoted) and sets the mode: sync (the default; a commit returns once
# the standby has it) or async. `promote` promotes the standby (pg_ctl promote), the failover.
# `status` prints the multi-host DSN with target_session_attrs=read-write.
#
# `nats-cluster` runs three NATS servers (the pinned release, JetStream on) routed into one
# cluster, for the NATS cluster acceptance test: server N listens for clients on
# TIMEOUTMILL_NATS_CLUSTER_PORT + N - 1 (base 4250), for routes on base + 3 + N - 1, for monitoring
# on base + 6 + N - 1, is named ${TIMEOUTMILL_NATS_CLUSTER_NAME:-tmnats}-N and lives in
# $TIMEOUTMILL_SERVICES_DIR/nats-cluster/nodeN. `up` starts the servers (all, or those named by
# number); a server started again catches up with the others. While all three run, `env` prints
# TIMEOUTMILL_TEST_NATS_CLUSTER_URL (the three URLs, joined by commas). `make test` does not start
# it: the test does.
set -euo pipefail

STATE=${TIMEOUTMILL_SERVICES_DIR:-/tmp/timeoutmill-services}
RABBITMQ_PORT=${TIMEOUTMILL_RABBITMQ_PORT:-5682}
POSTGRES_PORT=${TIMEOUTMILL_POSTGRES_PORT:-5442}
MARIADB_PORT=${TIMEOUTMILL_MARIADB_PORT:-3316}
REDIS_PORT=${TIMEOUTMILL_REDIS_PORT:-6389}
NATS_PORT=${TIMEOUTMILL_NATS_PORT:-4232}
TOXIPROXY_PORT=${TIMEOUTMILL_TOXIPROXY_PORT:-8484}
# A second set of servers (another state dir and ports) needs another node name: they share epmd.
RABBITMQ_NODE=${TIMEOUTMILL_RABBITMQ_NODENAME:-timeoutmill@localhost}

RABBITMQ_BIN=/usr/lib/rabbitmq/bin
PG_BIN=/usr/lib/postgresql/15/bin
RABBITMQ_DIR=$STATE/rabbitmq
PG_DIR=$STATE/postgres
MARIADB_DIR=$STATE/mariadb
REDIS_DIR=$STATE/redis
NATS_DIR=$STATE/nats
TOXIPROXY_DIR=$STATE/toxiproxy
ENV_FILE=$STATE/env

# Test credentials: these servers only listen on loopback and hold throwaway data.
DB_NAME=timeoutmill
MARIADB_USER=timeoutmill
MARIADB_PASSWORD=timeoutmill

# The toxiproxy release `go install` builds. Its server package is cmd/server, so the binary is
# called `server`: it goes into a directory named by the version, with a toxiproxy-server link.
TOXIPROXY_MODULE=github.com/Shopify/toxiproxy/v2
TOXIPROXY_VERSION=v2.12.0
TOXIPROXY_BIN=$TOXIPROXY_DIR/$TOXIPROXY_VERSION/toxiproxy-server

# The nats-server release `go install` builds (Debian 12 ships 2.9, before message schedules). A
# new version goes into a directory of its own, so changing this line installs it on the next `up`.
# TIMEOUTMILL_INSTALL_DIR (default: the state dir) lets state dirs share one build: the tests'
# private servers use the shared servers' instead of building their own.
NATS_MODULE=github.com/nats-io/nats-server/v2
NATS_VERSION=v2.15.3
NATS_BIN=${TIMEOUTMILL_INSTALL_DIR:-$STATE}/nats/$NATS_VERSION/nats-server

ALL_SERVICES=(rabbitmq postgres mariadb redis nats toxiproxy)
# What this run learnt of each service ("up" or "down"), so that the env file need not ask again:
# a rabbitmqctl call boots an Erlang VM, 1 s or more on a busy machine.
declare -A KNOWN=()

log() { printf '[services %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() {
	log "ERROR: $*"
	exit 1
}

# timed LABEL CMD... runs CMD and logs how long it took, so slow steps show up in CI logs.
timed() {
	local label=$1 start=$EPOCHREALTIME rc=0
	shift
	"$@" || rc=$?
	log "$label: $(elapsed "$start")s$([ "$rc" -eq 0 ] || echo " (exit $rc)")"
	return "$rc"
}

# to_log FILE CMD... runs CMD with its output in FILE (so timed's own line still reaches stderr).
to_log() {
	local f=$1
	shift
	"$@" >"$f" 2>&1
}

elapsed() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }

# wait_for SECONDS DESCRIPTION CMD... retries CMD every 0.2 s until it succeeds.
wait_for() {
	local timeout=$1 what=$2 deadline
	shift 2
	deadline=$((SECONDS + timeout))
	until "$@" >/dev/null 2>&1; do
		if ((SECONDS >= deadline)); then
			log "timed out after ${timeout}s waiting for $what"
			return 1
		fi
		sleep 0.2
	done
}

# pid_alive PID: PID runs. A killed process whose parent is init can stay a zombie for seconds here
# (kill -0 still succeeds), so zombies count as gone.
pid_alive() {
	[ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null || return 1
	local stat
	stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	stat=${stat##*) }
	[ "${stat%% *}" != Z ]
}
# pid_is PID WORD: PID is alive and its command line mentions WORD (a saved PID may have been reused).
pid_is() { pid_alive "$1" && tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -q -- "$2"; }
read_pid() { if [ -s "$1" ]; then head -n1 "$1" | tr -dc '0-9'; fi; }

# wait_gone PID SECONDS waits for a process to exit, then kills it if it did not.
wait_gone() {
	local pid=$1 timeout=$2 deadline=$((SECONDS + $2))
	while pid_alive "$pid"; do
		if ((SECONDS >= deadline)); then
			log "process $pid still alive after ${timeout}s: killing it"
			kill -9 "$pid" 2>/dev/null || true
			sleep 0.5
			return 0
		fi
		sleep 0.1
	done
}

port_in_use() { ss -Hltn "sport = :$1" 2>/dev/null | grep -q .; }

show_log() {
	local f=$1
	[ -f "$f" ] || return 0
	log "last lines of $f:"
	tail -n 30 "$f" >&2 || true
}

# ---------------------------------------------------------------------------------------------
# Installation

package_installed() { [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)" = "install ok installed" ]; }

# install_missing SERVICE... installs every missing package of those services in one apt-get run.
install_missing() {
	local missing=() svc pkg
	for svc in "$@"; do
		case $svc in
		rabbitmq) for pkg in rabbitmq-server amqp-tools; do package_installed "$pkg" || missing+=("$pkg"); done ;;
		mariadb) package_installed mariadb-server || missing+=(mariadb-server) ;;
		redis) for pkg in redis-server redis-tools; do package_installed "$pkg" || missing+=("$pkg"); done ;;
		nats) command -v curl >/dev/null || missing+=(curl) ;; # asks the monitoring port whether JetStream is ready
		postgres) [ -x "$PG_BIN/postgres" ] && [ -x "$PG_BIN/initdb" ] || missing+=(postgresql-15) ;;
		toxiproxy) command -v curl >/dev/null || missing+=(curl) ;; # asks its API whether it answers
		esac
	done
	# ss and runuser are on every Debian 12, but a minimal image may lack ss.
	command -v ss >/dev/null || missing+=(iproute2)
	[ ${#missing[@]} -eq 0 ] && return 0
	[ "$(id -u)" -eq 0 ] || die "missing packages (${missing[*]}) and not root: install them first"
	export DEBIAN_FRONTEND=noninteractive
	timed "apt-get update" apt-get update -qq || die "apt-get update failed"
	# --no-install-recommends: redis-server would otherwise pull in more than the server. The
	# packages try to start their own services; the image's policy-rc.d forbids it, and we start
	# ours by hand below.
	timed "apt-get install ${missing[*]}" to_log "$STATE/apt.log" apt-get install -y -qq --no-install-recommends -o Dpkg::Use-Pty=0 "${missing[@]}" ||
		{
			show_log "$STATE/apt.log"
			die "apt-get install ${missing[*]} failed"
		}
}

# ---------------------------------------------------------------------------------------------
# RabbitMQ: the real binaries in /usr/lib/rabbitmq/bin (the /usr/sbin wrappers su to user rabbitmq,
# which has another Erlang cookie), isolated in $RABBITMQ_DIR by environment variables.

rabbitmq_env() {
	export HOME=$RABBITMQ_DIR
	export RABBITMQ_NODENAME=$RABBITMQ_NODE
	export RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
	export RABBITMQ_NODE_PORT=$RABBITMQ_PORT
	export RABBITMQ_DIST_PORT=$((RABBITMQ_PORT + 20000))
	export ERL_EPMD_ADDRESS=127.0.0.1
	export RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
	export RABBITMQ_MNESIA_BASE=$RABBITMQ_DIR/mnesia
	export RABBITMQ_LOG_BASE=$RABBITMQ_DIR/log
	export RABBITMQ_PID_FILE=$RABBITMQ_DIR/rabbit.pid
	export RABBITMQ_ENABLED_PLUGINS_FILE=$RABBITMQ_DIR/enabled_plugins
	export RABBITMQ_CONFIG_FILE=$RABBITMQ_DIR/rabbitmq
	export RABBITMQ_CONF_ENV_FILE=$RABBITMQ_DIR/rabbitmq-env.conf
}

# The variables rabbitmqctl needs, as written into the env file and the wrapper.
rabbitmq_env_lines() {
	local v
	for v in HOME RABBITMQ_NODENAME RABBITMQ_NODE_IP_ADDRESS RABBITMQ_NODE_PORT RABBITMQ_DIST_PORT \
		ERL_EPMD_ADDRESS RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS RABBITMQ_MNESIA_BASE RABBITMQ_LOG_BASE \
		RABBITMQ_PID_FILE RABBITMQ_ENABLED_PLUGINS_FILE RABBITMQ_CONFIG_FILE RABBITMQ_CONF_ENV_FILE; do
		printf '%s=%q\n' "$v" "${!v}"
	done
}

rabbitmqctl() { (rabbitmq_env && "$RABBITMQ_BIN/rabbitmqctl" "$@"); }
# Any CLI call starts epmd when none runs, so ask epmd (which it does not start) about the node first.
rabbitmq_registered() { command -v epmd >/dev/null && epmd -names 2>/dev/null | grep -q "^name ${RABBITMQ_NODENAME%@*} at port"; }
rabbitmq_ping() { rabbitmq_registered && rabbitmqctl -q ping >/dev/null 2>&1; }

rabbitmq_prepare() {
	# The directories must exist before any CLI call: a missing $HOME makes the CLI hang and fail.
	mkdir -p "$RABBITMQ_DIR/log" "$RABBITMQ_DIR/mnesia"
	: >"$RABBITMQ_DIR/rabbitmq-env.conf"
	# max_message_size: RabbitMQ 4's default (3.10 allows 128 MiB), so that the tests meet a broker
	# refusing a message at a size they can afford to send.
	printf 'listeners.tcp.default = 127.0.0.1:%s\nloopback_users.guest = true\nmax_message_size = 16777216\n' "$RABBITMQ_PORT" >"$RABBITMQ_DIR/rabbitmq.conf"
	echo '[].' >"$RABBITMQ_DIR/enabled_plugins"
	# rabbitmqctl as used by tests: the same environment, without exporting HOME into their shell.
	{
		echo '#!/bin/sh'
		echo '# Generated by scripts/services.sh: rabbitmqctl for the timeoutmill test node.'
		rabbitmq_env_lines | sed 's/^/export /'
		echo "exec $RABBITMQ_BIN/rabbitmqctl \"\$@\""
	} >"$RABBITMQ_DIR/rabbitmqctl"
	chmod 755 "$RABBITMQ_DIR/rabbitmqctl"
}

# The node runs as beam.smp under a /bin/sh launcher; either may be what is left after a crash.
rabbitmq_pids() {
	local pid
	for pid in "$(read_pid "$RABBITMQ_DIR/server.pid")" "$(read_pid "$RABBITMQ_DIR/rabbit.pid")"; do
		if pid_is "$pid" rabbit; then echo "$pid"; fi
	done
}

rabbitmq_up() {
	rabbitmq_env
	rabbitmq_prepare
	# A ping that answers (our node name and cookie) is the guard against a second start, which
	# would fail on the distribution port and delete the running node's pid file.
	if rabbitmq_ping; then
		log "rabbitmq: already up (port $RABBITMQ_PORT)"
		return 0
	fi
	local pids
	pids=$(rabbitmq_pids)
	if [ -n "$pids" ]; then
		log "rabbitmq: pid ${pids//$'\n'/ } is running but not answering yet: waiting for it"
	else
		if port_in_use "$RABBITMQ_PORT" || port_in_use "$RABBITMQ_DIST_PORT"; then
			die "rabbitmq: port $RABBITMQ_PORT or $RABBITMQ_DIST_PORT is taken by a process this script did not start"
		fi
		rm -f "$RABBITMQ_PID_FILE"
		nohup "$RABBITMQ_BIN/rabbitmq-server" >"$RABBITMQ_DIR/log/stdout.log" 2>&1 </dev/null 9>&- &
		echo "$!" >"$RABBITMQ_DIR/server.pid"
		log "rabbitmq: started pid $! on 127.0.0.1:$RABBITMQ_PORT"
	fi
	if ! timed "rabbitmq: wait for startup" rabbitmq_await; then
		show_log "$RABBITMQ_DIR/log/stdout.log"
		die "rabbitmq did not start"
	fi
}

# rabbitmq_await waits for the node: `await_startup` alone fails at once before the node has
# registered with epmd, so wait for its pid file, then `wait`, then `await_startup`.
rabbitmq_await() {
	local deadline=$((SECONDS + 120))
	until [ -s "$RABBITMQ_PID_FILE" ]; do
		[ -n "$(rabbitmq_pids)" ] || return 1
		((SECONDS < deadline)) || return 1
		sleep 0.2
	done
	rabbitmqctl -q wait --timeout 120 "$RABBITMQ_PID_FILE" >/dev/null &&
		rabbitmqctl -q await_startup --timeout 120 >/dev/null
}

rabbitmq_down() {
	rabbitmq_env
	[ -d "$RABBITMQ_DIR" ] || return 0
	local pids pid
	pids=$(rabbitmq_pids)
	if rabbitmq_ping; then
		timed "rabbitmq: stop" rabbitmqctl -q stop >/dev/null || true
	elif [ -n "$pids" ]; then
		# shellcheck disable=SC2086 # one pid per word
		kill $pids 2>/dev/null || true
	fi
	for pid in $pids; do wait_gone "$pid" 30; done
	rm -f "$RABBITMQ_DIR/server.pid" "$RABBITMQ_PID_FILE"
	# epmd outlives the node; it refuses -kill while other nodes are registered with it.
	if command -v epmd >/dev/null && pgrep -x epmd >/dev/null; then
		ERL_EPMD_ADDRESS=127.0.0.1 epmd -kill >/dev/null 2>&1 || true
	fi
	log "rabbitmq: down"
}

rabbitmq_status() {
	rabbitmq_env
	if [ -d "$RABBITMQ_DIR" ] && rabbitmq_ping; then
		echo "rabbitmq: up (pid $(read_pid "$RABBITMQ_PID_FILE"), amqp 127.0.0.1:$RABBITMQ_PORT)"
	else
		echo "rabbitmq: down"
		return 1
	fi
}

# ---------------------------------------------------------------------------------------------
# A RabbitMQ cluster: three nodes of the functions above, each in a subshell with its own
# RABBITMQ_DIR, RABBITMQ_PORT and RABBITMQ_NODE.

CLUSTER_DIR=$STATE/cluster
CLUSTER_PORT=${TIMEOUTMILL_CLUSTER_PORT:-5692}
CLUSTER_NAME=${TIMEOUTMILL_CLUSTER_NAME:-tmcluster}
CLUSTER_NODES=(1 2 3)

cluster_node() {
	RABBITMQ_DIR=$CLUSTER_DIR/node$1
	RABBITMQ_PORT=$((CLUSTER_PORT + $1 - 1))
	RABBITMQ_NODE=$CLUSTER_NAME$1@localhost
}

# cluster_cookie writes the cluster's one Erlang cookie into node $1's HOME: nodes with different
# cookies cannot talk, and each node would otherwise make its own.
cluster_cookie() {
	local cookie=$CLUSTER_DIR/cookie dir=$CLUSTER_DIR/node$1
	if [ ! -s "$cookie" ]; then
		mkdir -p "$CLUSTER_DIR"
		(umask 077 && od -An -tx1 -N20 /dev/urandom | tr -d ' \n' | tr a-f A-F >"$cookie")
	fi
	mkdir -p "$dir/log" "$dir/mnesia"
	if ! cmp -s "$cookie" "$dir/.erlang.cookie" 2>/dev/null; then
		rm -f "$dir/.erlang.cookie"
		cp "$cookie" "$dir/.erlang.cookie"
		chmod 400 "$dir/.erlang.cookie"
	fi
}

# cluster_join joins node $1 to node 1, once (the node remembers its cluster across restarts).
cluster_join() {
	cluster_node "$1"
	[ -f "$RABBITMQ_DIR/joined" ] && return 0
	rabbitmq_env
	local first=${CLUSTER_NAME}1@localhost
	# join_cluster resets the node itself. Its warnings (a fresh node's feature flags) go to the log.
	{
		rabbitmqctl -q stop_app &&
			rabbitmqctl -q join_cluster "$first" &&
			rabbitmqctl -q start_app
	} >>"$RABBITMQ_DIR/log/join.log" 2>&1 || {
		show_log "$RABBITMQ_DIR/log/join.log"
		return 1
	}
	touch "$RABBITMQ_DIR/joined"
	log "cluster: $RABBITMQ_NODE joined $first"
}

cluster_up() {
	local n pids=() rc=0
	install_missing rabbitmq
	for n in "$@"; do
		cluster_cookie "$n"
		(cluster_node "$n" && rabbitmq_up) &
		pids+=($!)
	done
	for n in "${pids[@]}"; do wait "$n" || rc=1; done
	[ "$rc" -eq 0 ] || die "cluster: a node did not start"
	for n in "$@"; do
		[ "$n" = 1 ] && continue
		timed "cluster: join node $n" cluster_join "$n" || die "cluster: node $n could not join node 1"
	done
	log "cluster: up, AMQP on 127.0.0.1 ports $CLUSTER_PORT-$((CLUSTER_PORT + ${#CLUSTER_NODES[@]} - 1))"
}

cluster_down() {
	local n pids=()
	for n in "$@"; do
		(cluster_node "$n" && rabbitmq_down) &
		pids+=($!)
	done
	for n in "${pids[@]}"; do wait "$n" || true; done
}

cluster_status() {
	local n rc=0
	for n in "$@"; do
		(cluster_node "$n" && rabbitmq_status) | sed "s/^rabbitmq/cluster node $n/" || rc=1
	done
	return "$rc"
}

cluster_main() {
	[ $# -ge 1 ] || usage
	local cmd=$1 n nodes=()
	shift
	for n in "$@"; do
		case $n in
		1 | 2 | 3) nodes+=("$n") ;;
		*) die "unknown cluster node '$n' (want 1, 2 or 3)" ;;
		esac
	done
	[ ${#nodes[@]} -gt 0 ] || nodes=("${CLUSTER_NODES[@]}")
	case $cmd in
	up | down | status) ;;
	*) usage ;;
	esac
	mkdir -p "$STATE"
	exec 9>"$STATE/cluster.lock"
	flock 9
	"cluster_$cmd" "${nodes[@]}"
}

# ---------------------------------------------------------------------------------------------
# PostgreSQL 15: refuses to run as root, so it runs as user postgres on a data dir in $PG_DIR.

as_postgres() { runuser -u postgres -- "$@"; }
# Not `pg_ctl status`: it takes a zombie postmaster (after kill -9) for a running one.
pg_running() { [ -f "$PG_DIR/data/PG_VERSION" ] && pid_is "$(read_pid "$PG_DIR/data/postmaster.pid")" postgres; }
pg_ready() { "$PG_BIN/pg_isready" -q -U postgres -h 127.0.0.1 -p "$POSTGRES_PORT"; }
psql_pg() { "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -U postgres -h 127.0.0.1 -p "$POSTGRES_PORT" "$@"; }

pg_start() {
	as_postgres "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/server.log" -w -t 60 \
		-o "-c listen_addresses=127.0.0.1 -p $POSTGRES_PORT -c unix_socket_directories=$PG_DIR -c max_connections=300" \
		start >/dev/null 2>>"$PG_DIR/pg_ctl.log" 9>&-
}

postgres_up() {
	id postgres >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin postgres
	mkdir -p "$PG_DIR"
	chown postgres: "$PG_DIR"
	chmod 700 "$PG_DIR"
	as_postgres test -x "$PG_DIR" ||
		die "postgres: user postgres cannot reach $PG_DIR; set TIMEOUTMILL_SERVICES_DIR to a directory whose parents are traversable (like /tmp/...)"
	if pg_running && pg_ready; then
		log "postgres: already up (port $POSTGRES_PORT)"
		return 0
	fi
	if [ ! -f "$PG_DIR/data/PG_VERSION" ]; then
		rm -rf "$PG_DIR/data"
		timed "postgres: initdb" to_log "$PG_DIR/initdb.log" as_postgres "$PG_BIN/initdb" -D "$PG_DIR/data" -U postgres -A trust -E UTF8 --locale=C.UTF-8 ||
			{
				show_log "$PG_DIR/initdb.log"
				die "postgres: initdb failed"
			}
	fi
	if ! pg_running; then
		port_in_use "$POSTGRES_PORT" && die "postgres: port $POSTGRES_PORT is taken by a process this script did not start"
		# A crashed postmaster leaves its pid file; postgres would refuse it while the pid is a zombie.
		if [ -f "$PG_DIR/data/postmaster.pid" ]; then
			log "postgres: removing the stale postmaster.pid of a server that is gone"
			rm -f "$PG_DIR/data/postmaster.pid"
		fi
		# After a kill -9 the old backends hold the lock for about a second: retry a few times.
		local try
		for try in 1 2 3 4 5; do
			if timed "postgres: start (try $try)" pg_start; then
				break
			fi
			[ "$try" -lt 5 ] || {
				show_log "$PG_DIR/server.log"
				die "postgres did not start"
			}
			sleep 1
		done
	fi
	wait_for 30 "postgres to accept connections" pg_ready || die "postgres is not ready"
	if [ "$(psql_pg -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname = '$DB_NAME'")" != 1 ]; then
		psql_pg -d postgres -c "CREATE DATABASE $DB_NAME"
	fi
	log "postgres: up (port $POSTGRES_PORT, database $DB_NAME)"
}

postgres_down() {
	[ -f "$PG_DIR/data/PG_VERSION" ] || return 0
	if pg_running; then
		timed "postgres: stop" as_postgres "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -m fast -w -t 60 stop >/dev/null
	fi
	log "postgres: down"
}

postgres_status() {
	if pg_running && pg_ready; then
		echo "postgres: up (pid $(read_pid "$PG_DIR/data/postmaster.pid"), 127.0.0.1:$POSTGRES_PORT)"
	else
		echo "postgres: down"
		return 1
	fi
}

# ---------------------------------------------------------------------------------------------
# A PostgreSQL primary and a streaming standby on loopback, for failover drills (pg-replica).
# The functions above run each node in a subshell with PG_DIR and POSTGRES_PORT set to the
# node's. The primary listens on TIMEOUTMILL_PG_REPLICA_PORT (5452), the standby on that + 1;
# both live in $STATE/pg-replica. Nothing in a pair is worth keeping: a pair whose standby was
# promoted is rebuilt from scratch by the next `pg-replica up`.

REPLICA_DIR=$STATE/pg-replica
REPLICA_PORT=${TIMEOUTMILL_PG_REPLICA_PORT:-5452}
# The standby's name on the primary, which synchronous_standby_names lists in sync mode.
REPLICA_STANDBY_NAME=tmstandby

# replica_node primary|standby points the PostgreSQL functions at that node.
replica_node() {
	PG_DIR=$REPLICA_DIR/$1
	POSTGRES_PORT=$REPLICA_PORT
	[ "$1" = primary ] || POSTGRES_PORT=$((REPLICA_PORT + 1))
}

replica_dsn() {
	echo "postgres://postgres@127.0.0.1:$REPLICA_PORT,127.0.0.1:$((REPLICA_PORT + 1))/$DB_NAME?sslmode=disable&target_session_attrs=read-write"
}

# replica_intact: both data dirs exist and the standby is still one (never promoted).
replica_intact() {
	[ -f "$REPLICA_DIR/primary/data/PG_VERSION" ] && [ -f "$REPLICA_DIR/standby/data/standby.signal" ]
}

replica_prepare_dir() {
	mkdir -p "$1"
	chown postgres: "$1"
	chmod 700 "$1"
}

# replica_build makes a new pair: a primary with the test database, then the standby as a base
# backup of it, streaming from a replication slot (the primary keeps the WAL the standby misses).
replica_build() {
	log "pg-replica: building a new primary and standby in $REPLICA_DIR"
	(replica_node primary && postgres_down) || true
	(replica_node standby && postgres_down) || true
	rm -rf "$REPLICA_DIR/primary" "$REPLICA_DIR/standby"
	mkdir -p "$REPLICA_DIR"
	chmod 755 "$REPLICA_DIR"
	replica_prepare_dir "$REPLICA_DIR/primary"
	replica_prepare_dir "$REPLICA_DIR/standby"
	(replica_node primary && postgres_up) || die "pg-replica: the primary did not start"
	local primary_port=$REPLICA_PORT
	timed "pg-replica: base backup" to_log "$REPLICA_DIR/standby/basebackup.log" \
		as_postgres "$PG_BIN/pg_basebackup" -h 127.0.0.1 -p "$primary_port" -U postgres \
		-D "$REPLICA_DIR/standby/data" -X stream -c fast -C -S "$REPLICA_STANDBY_NAME" ||
		{
			show_log "$REPLICA_DIR/standby/basebackup.log"
			die "pg-replica: pg_basebackup failed"
		}
	as_postgres touch "$REPLICA_DIR/standby/data/standby.signal"
	# The base backup copied the primary's postgresql.auto.conf; later lines win.
	as_postgres tee -a "$REPLICA_DIR/standby/data/postgresql.auto.conf" >/dev/null <<-CONF
		primary_conninfo = 'host=127.0.0.1 port=$primary_port user=postgres application_name=$REPLICA_STANDBY_NAME'
		primary_slot_name = '$REPLICA_STANDBY_NAME'
	CONF
}

# replica_mode sync|async sets the primary's synchronous_standby_names: in sync mode a commit
# returns once the standby has flushed its WAL. Set on the primary only (ALTER SYSTEM after the
# base backup), so that a promoted standby does not wait for a standby of its own.
replica_mode() {
	local names=''
	[ "$1" = sync ] && names=$REPLICA_STANDBY_NAME
	(
		replica_node primary
		psql_pg -d postgres -c "ALTER SYSTEM SET synchronous_standby_names = '$names'" -c "SELECT pg_reload_conf()" >/dev/null
	) || die "pg-replica: could not set the primary's synchronous_standby_names"
}

# replica_streaming: the primary sees the standby streaming (and, in sync mode, as sync).
replica_streaming() {
	local want=$1 state
	state=$(replica_node primary && psql_pg -d postgres -tAc \
		"SELECT sync_state FROM pg_stat_replication WHERE application_name = '$REPLICA_STANDBY_NAME' AND state = 'streaming'")
	[ -n "$state" ] && { [ "$want" = async ] || [ "$state" = sync ]; }
}

pg_replica_up() {
	local mode=$1
	id postgres >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin postgres
	install_missing postgres
	replica_intact || replica_build
	(replica_node primary && postgres_up) || die "pg-replica: the primary did not start"
	(replica_node standby && postgres_up) || die "pg-replica: the standby did not start"
	replica_mode "$mode"
	timed "pg-replica: wait for the standby to stream ($mode)" wait_for 60 "the standby to stream" replica_streaming "$mode" ||
		{
			show_log "$REPLICA_DIR/standby/server.log"
			die "pg-replica: the standby does not stream from the primary"
		}
	log "pg-replica: up ($mode), primary 127.0.0.1:$REPLICA_PORT, standby 127.0.0.1:$((REPLICA_PORT + 1)); DSN $(replica_dsn)"
}

pg_replica_down() {
	[ -d "$REPLICA_DIR" ] || return 0
	(replica_node standby && postgres_down) || true
	(replica_node primary && postgres_down) || true
}

# pg_replica_status says what each node is (primary, standby, or down) and prints the DSN.
pg_replica_status() {
	local node rc=0 recovery
	for node in primary standby; do
		if (replica_node "$node" && pg_running && pg_ready); then
			recovery=$(replica_node "$node" && psql_pg -d postgres -tAc 'SELECT pg_is_in_recovery()')
			echo "pg-replica $node: up ($([ "$recovery" = t ] && echo "in recovery, a standby" || echo "read-write, a primary"), pid $(read_pid "$REPLICA_DIR/$node/data/postmaster.pid"), 127.0.0.1:$(replica_node "$node" && echo "$POSTGRES_PORT"))"
		else
			echo "pg-replica $node: down"
			rc=1
		fi
	done
	echo "pg-replica dsn: $(replica_dsn)"
	return "$rc"
}

# pg_replica_promote makes the standby a primary, as Patroni or a managed service does on failover.
pg_replica_promote() {
	(replica_node standby && pg_running) || die "pg-replica: the standby is not running"
	if (replica_node primary && pg_running); then
		log "pg-replica: the old primary still runs: there will be two primaries (a failover kills or fences it first)"
	fi
	timed "pg-replica: promote the standby" as_postgres "$PG_BIN/pg_ctl" -D "$REPLICA_DIR/standby/data" -w -t 60 promote >/dev/null ||
		die "pg-replica: promotion failed"
	log "pg-replica: 127.0.0.1:$((REPLICA_PORT + 1)) is the primary now"
}

pg_replica_main() {
	[ $# -ge 1 ] || usage
	local cmd=$1 mode=${2:-sync}
	case $cmd in
	up | down | status | promote) ;;
	*) usage ;;
	esac
	case $mode in
	sync | async) ;;
	*) die "unknown pg-replica mode '$mode' (want sync or async)" ;;
	esac
	mkdir -p "$STATE"
	chmod 755 "$STATE"
	exec 9>"$STATE/pg-replica.lock"
	flock 9
	case $cmd in
	up) pg_replica_up "$mode" ;;
	*) "pg_replica_$cmd" ;;
	esac
}

# ---------------------------------------------------------------------------------------------
# MariaDB: its own datadir in $MARIADB_DIR; root logs in by socket only, tests use a TCP user.

mariadb_admin() { mariadb-admin --no-defaults --socket="$MARIADB_DIR/mysqld.sock" -uroot "$@"; }
mariadb_ping() { [ -S "$MARIADB_DIR/mysqld.sock" ] && mariadb_admin --connect-timeout=2 ping >/dev/null 2>&1; }
mariadb_sql() { mariadb --no-defaults --socket="$MARIADB_DIR/mysqld.sock" -uroot; }

mariadb_up() {
	mkdir -p "$MARIADB_DIR"
	chown mysql: "$MARIADB_DIR"
	local pid
	pid=$(read_pid "$MARIADB_DIR/server.pid")
	if mariadb_ping; then
		log "mariadb: already up (port $MARIADB_PORT)"
	else
		if [ ! -d "$MARIADB_DIR/data/mysql" ]; then
			rm -rf "$MARIADB_DIR/data"
			timed "mariadb: install-db" to_log "$MARIADB_DIR/install-db.log" mariadb-install-db --no-defaults --user=mysql --datadir="$MARIADB_DIR/data" \
				--auth-root-authentication-method=socket --skip-test-db ||
				{
					show_log "$MARIADB_DIR/install-db.log"
					die "mariadb: install-db failed"
				}
		fi
		if pid_is "$pid" mariadbd; then
			log "mariadb: pid $pid is running but not answering yet: waiting for it"
		else
			# A second server would wait 30 s on the datadir lock and overwrite the pid file.
			port_in_use "$MARIADB_PORT" && die "mariadb: port $MARIADB_PORT is taken by a process this script did not start"
			nohup mariadbd --no-defaults --user=mysql --datadir="$MARIADB_DIR/data" --socket="$MARIADB_DIR/mysqld.sock" \
				--pid-file="$MARIADB_DIR/mariadbd.pid" --port="$MARIADB_PORT" --bind-address=127.0.0.1 \
				--log-error="$MARIADB_DIR/error.log" --skip-name-resolve --max-connections=500 >"$MARIADB_DIR/stdout.log" 2>&1 </dev/null 9>&- &
			pid=$!
			echo "$pid" >"$MARIADB_DIR/server.pid"
			log "mariadb: started pid $pid on 127.0.0.1:$MARIADB_PORT"
		fi
		timed "mariadb: wait for startup" wait_for 120 "mariadb to answer" mariadb_ping ||
			{
				show_log "$MARIADB_DIR/error.log"
				die "mariadb did not start"
			}
	fi
	# The tests create a database (and users) of their own per test, so the user gets every privilege.
	mariadb_sql <<-SQL
		CREATE DATABASE IF NOT EXISTS \`$DB_NAME\`;
		CREATE USER IF NOT EXISTS '$MARIADB_USER'@'127.0.0.1' IDENTIFIED BY '$MARIADB_PASSWORD';
		GRANT ALL PRIVILEGES ON *.* TO '$MARIADB_USER'@'127.0.0.1' WITH GRANT OPTION;
	SQL
	log "mariadb: up (port $MARIADB_PORT, database $DB_NAME, user $MARIADB_USER)"
}

mariadb_down() {
	[ -d "$MARIADB_DIR" ] || return 0
	local pid
	pid=$(read_pid "$MARIADB_DIR/server.pid")
	if mariadb_ping; then
		timed "mariadb: shutdown" mariadb_admin shutdown || true
	elif pid_is "$pid" mariadbd; then
		kill "$pid" 2>/dev/null || true
	fi
	if pid_is "$pid" mariadbd; then wait_gone "$pid" 60; fi
	rm -f "$MARIADB_DIR/server.pid"
	log "mariadb: down"
}

mariadb_status() {
	if mariadb_ping; then
		echo "mariadb: up (pid $(read_pid "$MARIADB_DIR/mariadbd.pid"), 127.0.0.1:$MARIADB_PORT)"
	else
		echo "mariadb: down"
		return 1
	fi
}

# ---------------------------------------------------------------------------------------------
# Redis, NATS and toxiproxy are single daemons with a pid file NAME.pid in their directory, stopped
# and reported alike.

# daemon_down NAME DIR PROCESS stops the daemon of DIR/NAME.pid, if it is PROCESS.
daemon_down() {
	local name=$1 dir=$2 process=$3 pid
	[ -d "$dir" ] || return 0
	pid=$(read_pid "$dir/$name.pid")
	if pid_is "$pid" "$process"; then
		kill "$pid" 2>/dev/null || true
		wait_gone "$pid" 30
	fi
	rm -f "$dir/$name.pid"
	log "$name: down"
}

# daemon_status NAME DIR PROCESS PORT READY says whether the daemon of DIR/NAME.pid runs and the
# command READY succeeds.
daemon_status() {
	local name=$1 dir=$2 process=$3 port=$4 ready=$5 pid
	pid=$(read_pid "$dir/$name.pid")
	if pid_is "$pid" "$process" && "$ready"; then
		echo "$name: up (pid $pid, 127.0.0.1:$port)"
	else
		echo "$name: down"
		return 1
	fi
}

# ---------------------------------------------------------------------------------------------
# Redis 7: append-only file with fsync on every write (the only setting under which an
# acknowledged write survives a crash), daemonized, in $REDIS_DIR.

redis_cli() { redis-cli -h 127.0.0.1 -p "$REDIS_PORT" "$@"; }
redis_ping() { [ "$(redis_cli ping 2>/dev/null)" = PONG ]; }
redis_pid() { read_pid "$REDIS_DIR/redis.pid"; }

redis_up() {
	mkdir -p "$REDIS_DIR"
	if redis_ping && pid_is "$(redis_pid)" redis-server; then
		log "redis: already up (port $REDIS_PORT)"
		return 0
	fi
	if ! pid_is "$(redis_pid)" redis-server; then
		port_in_use "$REDIS_PORT" && die "redis: port $REDIS_PORT is taken by a process this script did not start"
		rm -f "$REDIS_DIR/redis.pid"
		# No config file: everything on the command line, so nothing of Debian's /etc/redis applies.
		redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --dir "$REDIS_DIR" \
			--appendonly yes --appendfsync always --save '' \
			--daemonize yes --pidfile "$REDIS_DIR/redis.pid" --logfile "$REDIS_DIR/redis.log" 9>&- ||
			{
				show_log "$REDIS_DIR/redis.log"
				die "redis did not start"
			}
		log "redis: started on 127.0.0.1:$REDIS_PORT"
	fi
	timed "redis: wait for startup" wait_for 30 "redis to answer" redis_ping ||
		{
			show_log "$REDIS_DIR/redis.log"
			die "redis is not ready"
		}
	log "redis: up (port $REDIS_PORT, appendfsync always)"
}

redis_down() { daemon_down redis "$REDIS_DIR" redis-server; }
redis_status() { daemon_status redis "$REDIS_DIR" redis-server "$REDIS_PORT" redis_ping; }

# ---------------------------------------------------------------------------------------------
# NATS with JetStream (file storage in $NATS_DIR/jetstream), from a config file of its own. Built
# from source by a pinned `go install` into $NATS_DIR/VERSION.

# A server of the cluster (below) runs with these set to its own: NATS_LABEL names it in messages,
# NATS_HTTP_PORT is its monitoring port, NATS_CLUSTER_CONF the lines that join it to the others.
NATS_LABEL=nats
NATS_HTTP_PORT=$((NATS_PORT + 4000))
NATS_CLUSTER_CONF=

nats_pid() { read_pid "$NATS_DIR/nats.pid"; }
# /healthz answers ok once JetStream is ready (in a cluster: current with its leaders), not just
# the port.
nats_ready() { curl -fsS "http://127.0.0.1:$NATS_HTTP_PORT/healthz" 2>/dev/null | grep -q ok; }
# nats_version MONITOR_PORT prints the version the server on that monitoring port reports (v2.15.3).
nats_version() {
	curl -fsS "http://127.0.0.1:$1/varz" 2>/dev/null | sed -n 's/^ *"version": *"\([^"]*\)".*/v\1/p' | head -n1
}

# nats_install builds the pinned release, unless a binary of that version is there already.
nats_install() {
	local dir=${NATS_BIN%/*} tmp
	[ -x "$NATS_BIN" ] && return 0
	command -v go >/dev/null || die "nats: installing it needs go on PATH (go install $NATS_MODULE@$NATS_VERSION)"
	mkdir -p "$dir"
	# Built aside and renamed into place, so that another script sharing the directory never runs
	# a half-written binary. Run outside the repository, so that nothing of its go.mod or GOFLAGS
	# applies to the install.
	tmp=$(mktemp -d "$dir/install.XXXXXX")
	timed "nats: go install $NATS_VERSION" to_log "$tmp.log" \
		env -C "$tmp" GOBIN="$tmp" GOFLAGS= go install "$NATS_MODULE@$NATS_VERSION" ||
		{
			show_log "$tmp.log"
			rm -rf "$tmp"
			die "nats: go install failed"
		}
	mv -f "$tmp/nats-server" "$NATS_BIN"
	rm -rf "$tmp" "$tmp.log"
}

nats_up() {
	mkdir -p "$NATS_DIR/jetstream"
	nats_install
	# max_payload: NATS refuses bigger messages (its default is 1 MB); the tests send 1 MiB bodies.
	cat >"$NATS_DIR/nats.conf" <<-CONF
		listen: 127.0.0.1:$NATS_PORT
		http: 127.0.0.1:$NATS_HTTP_PORT
		max_payload: 8MB
		pid_file: "$NATS_DIR/nats.pid"
		log_file: "$NATS_DIR/nats.log"
		jetstream {
		  store_dir: "$NATS_DIR/jetstream"
		}
		$NATS_CLUSTER_CONF
	CONF
	if pid_is "$(nats_pid)" nats-server && nats_ready; then
		local running
		running=$(nats_version "$NATS_HTTP_PORT")
		if [ "$running" = "$NATS_VERSION" ]; then
			log "$NATS_LABEL: already up ($NATS_VERSION, port $NATS_PORT)"
			return 0
		fi
		# A server of another version (the pinned one changed): replace it, keeping its JetStream data.
		log "$NATS_LABEL: ${running:-an unknown version} runs, $NATS_VERSION is pinned: restarting it"
		nats_down
	fi
	if ! pid_is "$(nats_pid)" nats-server; then
		port_in_use "$NATS_PORT" && die "$NATS_LABEL: port $NATS_PORT is taken by a process this script did not start"
		rm -f "$NATS_DIR/nats.pid"
		nohup "$NATS_BIN" -c "$NATS_DIR/nats.conf" >"$NATS_DIR/stdout.log" 2>&1 </dev/null 9>&- &
		log "$NATS_LABEL: started pid $! on 127.0.0.1:$NATS_PORT"
	fi
	timed "$NATS_LABEL: wait for startup" wait_for 60 "$NATS_LABEL to answer" nats_ready ||
		{
			show_log "$NATS_DIR/nats.log"
			die "$NATS_LABEL is not ready"
		}
	log "$NATS_LABEL: up ($NATS_VERSION, port $NATS_PORT, monitoring $NATS_HTTP_PORT, JetStream in $NATS_DIR/jetstream)"
}

nats_down() { daemon_down nats "$NATS_DIR" nats-server; }
nats_status() {
	local line
	line=$(daemon_status nats "$NATS_DIR" nats-server "$NATS_PORT" nats_ready) || {
		echo "$line"
		return 1
	}
	echo "${line%)}, $(nats_version "$NATS_HTTP_PORT"))"
}

# ---------------------------------------------------------------------------------------------
# A NATS cluster: three servers of the functions above, each in a subshell with its own NATS_DIR
# and ports, routed to each other, with JetStream clustered over them.

NATS_CLUSTER_DIR=$STATE/nats-cluster
NATS_CLUSTER_PORT=${TIMEOUTMILL_NATS_CLUSTER_PORT:-4250}
NATS_CLUSTER_NAME=${TIMEOUTMILL_NATS_CLUSTER_NAME:-tmnats}
NATS_CLUSTER_NODES=(1 2 3)

# nats_cluster_node N points the NATS functions at server N: client port base + N - 1, route
# port base + 3 + N - 1, monitoring port base + 6 + N - 1; its server name is NAME-N.
nats_cluster_node() {
	local n=$1 i routes=()
	NATS_DIR=$NATS_CLUSTER_DIR/node$n
	NATS_PORT=$((NATS_CLUSTER_PORT + n - 1))
	NATS_HTTP_PORT=$((NATS_CLUSTER_PORT + 6 + n - 1))
	NATS_LABEL="nats-cluster node $n"
	for i in "${NATS_CLUSTER_NODES[@]}"; do
		routes+=("nats-route://127.0.0.1:$((NATS_CLUSTER_PORT + 3 + i - 1))")
	done
	# Every server lists all three routes (its own is ignored), so any two find each other.
	NATS_CLUSTER_CONF="server_name: $NATS_CLUSTER_NAME-$n
cluster {
  name: $NATS_CLUSTER_NAME
  listen: 127.0.0.1:$((NATS_CLUSTER_PORT + 3 + n - 1))
  routes: [$(
		IFS=,
		echo "${routes[*]}"
	)]
}"
}

# nats_cluster_urls prints the three client URLs, joined by commas.
nats_cluster_urls() {
	local n urls=()
	for n in "${NATS_CLUSTER_NODES[@]}"; do urls+=("nats://127.0.0.1:$((NATS_CLUSTER_PORT + n - 1))"); done
	(
		IFS=,
		echo "${urls[*]}"
	)
}

nats_cluster_up() {
	local n pids=() rc=0
	install_missing nats
	nats_install
	# In parallel: a server answers /healthz only once JetStream has a meta leader, which takes two.
	for n in "$@"; do
		(nats_cluster_node "$n" && nats_up) &
		pids+=($!)
	done
	for n in "${pids[@]}"; do wait "$n" || rc=1; done
	[ "$rc" -eq 0 ] || die "nats-cluster: a server did not start"
	log "nats-cluster: up, $(nats_cluster_urls)"
}

nats_cluster_down() {
	local n pids=()
	for n in "$@"; do
		(nats_cluster_node "$n" && nats_down 2>/dev/null && log "nats-cluster node $n: down") &
		pids+=($!)
	done
	for n in "${pids[@]}"; do wait "$n" || true; done
}

nats_cluster_status() {
	local n rc=0
	for n in "$@"; do
		(nats_cluster_node "$n" && nats_status) | sed "s/^nats/nats-cluster node $n/" || rc=1
	done
	echo "nats-cluster urls: $(nats_cluster_urls)"
	return "$rc"
}

# nats_cluster_all_up: every server of the cluster runs and is ready.
nats_cluster_all_up() {
	local n
	for n in "${NATS_CLUSTER_NODES[@]}"; do
		(nats_cluster_node "$n" && pid_is "$(nats_pid)" nats-server && nats_ready) || return 1
	done
}

nats_cluster_main() {
	[ $# -ge 1 ] || usage
	local cmd=$1 n nodes=()
	shift
	for n in "$@"; do
		case $n in
		1 | 2 | 3) nodes+=("$n") ;;
		*) die "unknown nats-cluster server '$n' (want 1, 2 or 3)" ;;
		esac
	done
	[ ${#nodes[@]} -gt 0 ] || nodes=("${NATS_CLUSTER_NODES[@]}")
	case $cmd in
	up | down | status) ;;
	*) usage ;;
	esac
	mkdir -p "$STATE"
	chmod 755 "$STATE"
	exec 9>"$STATE/nats-cluster.lock"
	flock 9
	"nats_cluster_$cmd" "${nodes[@]}"
	[ "$cmd" = status ] || write_env
}

# ---------------------------------------------------------------------------------------------
# toxiproxy: a TCP proxy with an HTTP API that tests drive to put faults (latency, a black hole,
# resets, ...) between a process and a server. It starts with no proxies: each test creates its
# own and deletes them. Built from source by a pinned `go install` into $TOXIPROXY_DIR/VERSION.

toxiproxy_pid() { read_pid "$TOXIPROXY_DIR/toxiproxy.pid"; }
toxiproxy_ready() { curl -fsS "http://127.0.0.1:$TOXIPROXY_PORT/version" >/dev/null 2>&1; }

# toxiproxy_install builds the pinned release, unless a binary of that version is there already.
toxiproxy_install() {
	local dir=${TOXIPROXY_BIN%/*}
	[ -x "$dir/server" ] && [ -L "$TOXIPROXY_BIN" ] && return 0
	command -v go >/dev/null || die "toxiproxy: installing it needs go on PATH (go install $TOXIPROXY_MODULE/cmd/server@$TOXIPROXY_VERSION)"
	mkdir -p "$dir"
	# Run outside the repository, so that nothing of its go.mod or GOFLAGS applies to the install.
	timed "toxiproxy: go install $TOXIPROXY_VERSION" to_log "$TOXIPROXY_DIR/install.log" \
		env -C "$TOXIPROXY_DIR" GOBIN="$dir" GOFLAGS= go install "$TOXIPROXY_MODULE/cmd/server@$TOXIPROXY_VERSION" ||
		{
			show_log "$TOXIPROXY_DIR/install.log"
			die "toxiproxy: go install failed"
		}
	ln -sfn server "$TOXIPROXY_BIN"
}

toxiproxy_up() {
	mkdir -p "$TOXIPROXY_DIR"
	toxiproxy_install
	if pid_is "$(toxiproxy_pid)" toxiproxy-server && toxiproxy_ready; then
		log "toxiproxy: already up (port $TOXIPROXY_PORT)"
		return 0
	fi
	if ! pid_is "$(toxiproxy_pid)" toxiproxy-server; then
		port_in_use "$TOXIPROXY_PORT" && die "toxiproxy: port $TOXIPROXY_PORT is taken by a process this script did not start"
		rm -f "$TOXIPROXY_DIR/toxiproxy.pid"
		nohup "$TOXIPROXY_BIN" -host 127.0.0.1 -port "$TOXIPROXY_PORT" >"$TOXIPROXY_DIR/toxiproxy.log" 2>&1 </dev/null 9>&- &
		echo "$!" >"$TOXIPROXY_DIR/toxiproxy.pid"
		log "toxiproxy: started pid $! on 127.0.0.1:$TOXIPROXY_PORT"
	fi
	timed "toxiproxy: wait for startup" wait_for 30 "toxiproxy to answer" toxiproxy_ready ||
		{
			show_log "$TOXIPROXY_DIR/toxiproxy.log"
			die "toxiproxy is not ready"
		}
	log "toxiproxy: up ($TOXIPROXY_VERSION, API on 127.0.0.1:$TOXIPROXY_PORT)"
}

toxiproxy_down() { daemon_down toxiproxy "$TOXIPROXY_DIR" toxiproxy-server; }
toxiproxy_status() { daemon_status toxiproxy "$TOXIPROXY_DIR" toxiproxy-server "$TOXIPROXY_PORT" toxiproxy_ready; }

# ---------------------------------------------------------------------------------------------
# The env file: one export per running server, rewritten after every up and down.

is_up() {
	case ${KNOWN[$1]:-} in
	up) return 0 ;;
	down) return 1 ;;
	esac
	"${1}_status" >/dev/null 2>&1
}

write_env() {
	local tmp=$ENV_FILE.tmp.$$ # nats-cluster writes it under a lock of its own
	{
		echo "# Generated by scripts/services.sh; source it before running tests."
		if is_up rabbitmq; then
			echo "export TIMEOUTMILL_TEST_AMQP_URL=amqp://guest:guest@127.0.0.1:$RABBITMQ_PORT/"
			# HOME is not exported here: it would move Go's build and module caches. Use the wrapper,
			# or the real CLI with HOME=\$TIMEOUTMILL_RABBITMQ_HOME.
			echo "export TIMEOUTMILL_RABBITMQCTL=$RABBITMQ_DIR/rabbitmqctl"
			echo "export TIMEOUTMILL_RABBITMQCTL_BIN=$RABBITMQ_BIN/rabbitmqctl"
			echo "export TIMEOUTMILL_RABBITMQ_HOME=$RABBITMQ_DIR"
			(rabbitmq_env && rabbitmq_env_lines) | grep -v '^HOME=' | sed 's/^/export /'
		fi
		if is_up postgres; then
			echo "export TIMEOUTMILL_TEST_POSTGRES_DSN='postgres://postgres@127.0.0.1:$POSTGRES_PORT/$DB_NAME?sslmode=disable'"
		fi
		if is_up mariadb; then
			echo "export TIMEOUTMILL_TEST_MYSQL_DSN='$MARIADB_USER:$MARIADB_PASSWORD@tcp(127.0.0.1:$MARIADB_PORT)/$DB_NAME?parseTime=true'"
		fi
		if is_up redis; then
			echo "export TIMEOUTMILL_TEST_REDIS_URL=redis://127.0.0.1:$REDIS_PORT/0"
		fi
		if is_up nats; then
			echo "export TIMEOUTMILL_TEST_NATS_URL=nats://127.0.0.1:$NATS_PORT"
		fi
		if nats_cluster_all_up; then
			echo "export TIMEOUTMILL_TEST_NATS_CLUSTER_URL=$(nats_cluster_urls)"
		fi
		if is_up toxiproxy; then
			echo "export TIMEOUTMILL_TEST_TOXIPROXY_URL=http://127.0.0.1:$TOXIPROXY_PORT"
		fi
	} >"$tmp"
	mv "$tmp" "$ENV_FILE"
}

# ---------------------------------------------------------------------------------------------

services_from_args() {
	local svc
	if [ $# -eq 0 ]; then
		printf '%s\n' "${ALL_SERVICES[@]}"
		return
	fi
	for svc in "$@"; do
		case $svc in
		rabbitmq | postgres | mariadb | redis | nats | toxiproxy) echo "$svc" ;;
		*) die "unknown service '$svc' (want rabbitmq, postgres, mariadb, redis, nats or toxiproxy)" ;;
		esac
	done
}

usage() {
	sed -n '2,/^set -euo pipefail/{/^#/p}' "$0" | sed 's/^# \{0,1\}//' >&2
	exit 2
}

main() {
	[ $# -ge 1 ] || usage
	local cmd=$1 svc services start=$EPOCHREALTIME
	shift
	case $cmd in
	cluster)
		cluster_main "$@"
		return
		;;
	pg-replica)
		pg_replica_main "$@"
		return
		;;
	nats-cluster)
		nats_cluster_main "$@"
		return
		;;
	up | down | status | env) ;;
	-h | --help | help) usage ;;
	*) usage ;;
	esac
	mapfile -t services < <(services_from_args "$@")

	if [ "$cmd" = env ]; then
		[ -f "$ENV_FILE" ] || die "no $ENV_FILE: run '$0 up' first"
		cat "$ENV_FILE"
		return
	fi

	mkdir -p "$STATE"
	chmod 755 "$STATE"
	# One script at a time per state dir: two concurrent `up`s would double-start the servers.
	# The servers are started with fd 9 closed, or they would hold this lock for ever.
	exec 9>"$STATE/lock"
	flock 9

	case $cmd in
	up)
		install_missing "${services[@]}"
		local t
		for svc in "${services[@]}"; do
			t=$EPOCHREALTIME
			"${svc}_up"
			KNOWN[$svc]=up
			log "$svc: up took $(elapsed "$t")s"
		done
		write_env
		log "all up in $(elapsed "$start")s; env file: $ENV_FILE"
		;;
	down)
		for svc in "${services[@]}"; do
			"${svc}_down"
			KNOWN[$svc]=down
		done
		write_env
		log "down in $(elapsed "$start")s"
		;;
	status)
		local rc=0
		for svc in "${ALL_SERVICES[@]}"; do
			"${svc}_status" || rc=1
		done
		return "$rc"
		;;
	esac
}

main "$@"
