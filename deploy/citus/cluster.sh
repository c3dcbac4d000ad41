#!/usr/bin/env bash
# A local Citus cluster for trying and testing the ledger distributed by tenant: one
# coordinator and two workers, each its own PostgreSQL on a loopback port, made with
# initdb and run with pg_ctl from an installed Citus extension (see docs/how-to for
# building it). Nothing leaves 127.0.0.1; trust authentication, for tests only.
#
#   deploy/citus/cluster.sh start    # initdb (first time), start, join the workers
#   deploy/citus/cluster.sh status   # the nodes the coordinator knows
#   deploy/citus/cluster.sh url      # the coordinator's URL (EFFECT_BROKER_TEST_CITUS_URL)
#   deploy/citus/cluster.sh stop     # stop all three (the data stays)
#   deploy/citus/cluster.sh destroy  # stop and delete the data
#
# Settings (environment): CITUS_PG_BINDIR (default: pg_config --bindir),
# CITUS_DATA (default: ${TMPDIR:-/tmp}/effect-broker-citus), CITUS_PORT (coordinator,
# default 9700; the workers take the next two ports), CITUS_USER (the operating system
# user the servers run as when this script runs as root; default postgres: PostgreSQL
# refuses to run as root).
set -euo pipefail

BINDIR=${CITUS_PG_BINDIR:-$(pg_config --bindir)}
DATA=${CITUS_DATA:-${TMPDIR:-/tmp}/effect-broker-citus}
PORT=${CITUS_PORT:-9700}
RUN_AS=${CITUS_USER:-postgres}
NODES=(coordinator worker1 worker2)

die() { echo "cluster.sh: $*" >&2; exit 1; }

# Run a command as the servers' user: ourselves, or RUN_AS when we are root.
as_owner() {
    if [ "$(id -u)" -eq 0 ]; then
        runuser -u "$RUN_AS" -- "$@"
    else
        "$@"
    fi
}

port_of() {  # node index -> port
    echo $((PORT + $1))
}

sql() {  # port, statement: run on that node's postgres database
    PGOPTIONS="-c client_min_messages=warning" \
        as_owner "$BINDIR/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$1" -U postgres \
        -d postgres -At -c "$2"
}

check_citus() {
    local libdir
    libdir=$("$BINDIR/pg_config" --pkglibdir 2>/dev/null || pg_config --pkglibdir)
    [ -f "$libdir/citus.so" ] || die "no Citus in $libdir (citus.so): build and install \
the extension for this PostgreSQL first, or point CITUS_PG_BINDIR at one that has it"
}

start() {
    check_citus
    mkdir -p "$DATA"
    if [ "$(id -u)" -eq 0 ]; then
        chown "$RUN_AS" "$DATA"
    fi
    local i node dir
    for i in "${!NODES[@]}"; do
        node=${NODES[$i]}
        dir=$DATA/$node
        if [ ! -f "$dir/PG_VERSION" ]; then
            as_owner "$BINDIR/initdb" -D "$dir" -U postgres --auth=trust \
                --no-instructions -E UTF8 >"$DATA/$node.initdb.log"
            cat >>"$dir/postgresql.conf" <<EOF
# effect-broker's local Citus cluster (deploy/citus/cluster.sh)
listen_addresses = '127.0.0.1'
port = $(port_of "$i")
unix_socket_directories = '$dir'
shared_preload_libraries = 'citus'
max_connections = 200
# one Citus maintenance daemon per database: the tests make a database per test
max_worker_processes = 64
fsync = off
EOF
        fi
        if ! as_owner "$BINDIR/pg_ctl" -D "$dir" status >/dev/null 2>&1; then
            as_owner "$BINDIR/pg_ctl" -D "$dir" -l "$DATA/$node.log" -w -t 60 start \
                >/dev/null
        fi
        sql "$(port_of "$i")" "CREATE EXTENSION IF NOT EXISTS citus"
    done
    local coordinator
    coordinator=$(port_of 0)
    sql "$coordinator" \
        "SELECT citus_set_coordinator_host('127.0.0.1', $coordinator)" >/dev/null
    for i in 1 2; do
        sql "$coordinator" "SELECT citus_add_node('127.0.0.1', $(port_of "$i"))" \
            >/dev/null
    done
    status
    echo "coordinator: $(url)"
}

status() {
    sql "$(port_of 0)" \
        "SELECT nodename || ':' || nodeport || ' ' || noderole || CASE WHEN isactive
         THEN ' active' ELSE ' inactive' END FROM pg_dist_node ORDER BY nodeport"
}

stop() {
    local i dir
    for i in "${!NODES[@]}"; do
        dir=$DATA/${NODES[$i]}
        if [ -f "$dir/PG_VERSION" ] \
            && as_owner "$BINDIR/pg_ctl" -D "$dir" status >/dev/null 2>&1; then
            as_owner "$BINDIR/pg_ctl" -D "$dir" -m fast -w stop >/dev/null
        fi
    done
}

url() {
    echo "postgresql://postgres@127.0.0.1:$(port_of 0)/postgres"
}

case "${1:-}" in
    start) start ;;
    status) status ;;
    stop) stop ;;
    url) url ;;
    destroy)
        stop
        rm -rf "$DATA"
        ;;
    *) die "usage: $0 start|status|url|stop|destroy" ;;
esac
