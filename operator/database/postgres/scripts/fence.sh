#!/bin/sh
# deckhand: the write fence of a major upgrade (fence Job), and its lift
# (LIFT=true, the unfence Job).
#
# Fence, before the pre-upgrade dump: the app role APP_USER can no longer
# log in (ALTER ROLE ... NOLOGIN), then every session of it is ended
# (pg_terminate_backend), so no write reaches the server after the dump
# starts. The role first, the sessions next: a session that logs in
# between the two is ended too, and none can log in after. Sessions are
# swept until none is left (a backend still authenticating shows up a
# moment later). The superuser (PGUSER) is not fenced: the dump runs as
# it. default_transaction_read_only would not be a fence: any session can
# turn it off.
#
# Lift (after a rollback or a cancelled upgrade, when the old data
# directory serves again): ALTER ROLE ... LOGIN. Both are idempotent: a
# second run changes nothing.
#
# Only the app role is fenced: a role the user made by hand (as the
# superuser) keeps logging in. Names reach SQL through \getenv as quoted
# identifiers (format %I), never on a command line.
#
# Writes {"serverVersion", "sessionsEnded"} to the termination message.
#
# Environment (set by the Job): PRIMARY_HOST, PRIMARY_PORT, PGUSER and
# PGPASSWORD (the superuser), APP_USER, LIFT (true: lift),
# TERMINATION_MESSAGE_PATH; SERVER_WAIT_SECONDS (default 600).
set -eu
here=$(dirname "$0")
. "$here/lib.sh"

export PGHOST="$PRIMARY_HOST" PGPORT="$PRIMARY_PORT" PGDATABASE=postgres PGCONNECT_TIMEOUT=5
tls_client_env
wait_for_server

# sql: psql on stdin, names from the environment.
sql() { psql -X -q -A -t -v ON_ERROR_STOP=1 "$@"; }

ended=0
if [ "${LIFT:-false}" = true ]; then
	sql <<-'SQL'
	\getenv approle APP_USER
	SELECT format('ALTER ROLE %I LOGIN', :'approle')
	 WHERE EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = :'approle') \gexec
	SQL
	log "role $APP_USER can log in again"
else
	sql <<-'SQL'
	\getenv approle APP_USER
	SELECT format('ALTER ROLE %I NOLOGIN', :'approle')
	 WHERE EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = :'approle') \gexec
	SQL
	log "role $APP_USER can no longer log in"
	sweeps=0
	while :; do
		# pg_terminate_backend(pid, timeout) waits for the backend to exit
		# (PostgreSQL 14 and later).
		n=$(sql <<-'SQL'
		\getenv approle APP_USER
		SELECT count(*) FILTER (WHERE pg_catalog.pg_terminate_backend(pid, 5000))
		  FROM pg_catalog.pg_stat_activity WHERE usename = :'approle' AND pid <> pg_catalog.pg_backend_pid()
		SQL
		)
		ended=$((ended + n))
		left=$(sql <<-'SQL'
		\getenv approle APP_USER
		SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE usename = :'approle'
		SQL
		)
		[ "$left" = 0 ] && break
		sweeps=$((sweeps + 1))
		[ "$sweeps" -lt 10 ] || fail "$left sessions of $APP_USER are still open after $sweeps sweeps: writes are not fenced"
		sleep 1
	done
	log "ended $ended sessions of $APP_USER: no client of it can write"
fi

version=$(sql -c 'SHOW server_version')
printf '{"serverVersion":%s,"sessionsEnded":%d}\n' "$(json_string "$version")" "$ended" >"$TERMINATION_MESSAGE_PATH"
