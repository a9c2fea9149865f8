#!/bin/sh
# deckhand: the init Job of a PostgreSQL Database.
#
# Waits for the primary, then creates the app role and the database it
# owns, each only if missing: a second run changes nothing, and an existing
# database or role is left as it is, except that a role without a password
# (as a restore creates it) gets APP_PASSWORD, and with
# APP_PASSWORD_RESET=true (a Database recovered from another's archive,
# whose roles came with the data) the role gets APP_PASSWORD whatever it
# had. Names are quoted as identifiers
# (format %I), values as literals (%L), and reach psql through the
# environment (\getenv), never through the command line.
#
# Writes what it found as JSON to the termination message, which the
# operator reads from the Job's pod: {"serverVersion": "..."}.
#
# Uses only what PostgreSQL 15 to 18 share (\getenv is psql 15's).
#
# Environment (set by the Job): PRIMARY_HOST, PRIMARY_PORT, PGUSER and
# PGPASSWORD (the superuser), APP_DATABASE, APP_USER, APP_PASSWORD,
# TERMINATION_MESSAGE_PATH; PRIMARY_WAIT_SECONDS (default 600),
# APP_PASSWORD_RESET.
set -eu

log() { printf '%s init: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*" >&2; }

export PGHOST="$PRIMARY_HOST" PGPORT="$PRIMARY_PORT" PGDATABASE=postgres PGCONNECT_TIMEOUT=5
# With TLS (TLS_CA_FILE: the CA bundle), verify the primary's certificate
# (once TLS is required: the file "tls" beside this script; before, ask for
# TLS without requiring it).
if [ -n "${TLS_CA_FILE:-}" ]; then
	if [ "$(cat "$(dirname "$0")/tls" 2>/dev/null || true)" = required ]; then
		export PGSSLMODE=verify-full PGSSLROOTCERT="$TLS_CA_FILE"
	else
		export PGSSLMODE=prefer PGSSLROOTCERT="$TLS_CA_FILE"
	fi
fi

waited=0
until pg_isready -q; do
	if [ "$waited" -ge "${PRIMARY_WAIT_SECONDS:-600}" ]; then
		log "the primary at $PGHOST:$PGPORT did not accept connections within ${waited}s"
		exit 1
	fi
	log "waiting for the primary at $PGHOST:$PGPORT"
	sleep 2
	waited=$((waited + 2))
done

export APP_PASSWORD_RESET="${APP_PASSWORD_RESET:-false}"
psql -X -q -v ON_ERROR_STOP=1 <<'SQL'
-- The role's password must not reach the server log, even with an error.
SET log_statement = 'none';
SET log_min_error_statement = 'panic';
\getenv appdb APP_DATABASE
\getenv approle APP_USER
\getenv apppass APP_PASSWORD
\getenv reset APP_PASSWORD_RESET
SELECT format('CREATE ROLE %I LOGIN PASSWORD %L', :'approle', :'apppass')
 WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = :'approle') \gexec
-- A restore (restore.sh) creates the role without a password: give it one,
-- once; a role with a password keeps it.
SELECT format('ALTER ROLE %I PASSWORD %L', :'approle', :'apppass')
 WHERE EXISTS (SELECT FROM pg_catalog.pg_authid WHERE rolname = :'approle' AND (rolpassword IS NULL OR :'reset' = 'true')) \gexec
SELECT format('CREATE DATABASE %I OWNER %I', :'appdb', :'approle')
 WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_database WHERE datname = :'appdb') \gexec
SQL
log "database and role are in place"

version=$(psql -X -A -t -c 'SHOW server_version' | sed 's/[\\"]//g')
printf '{"serverVersion":"%s"}\n' "$version" >"$TERMINATION_MESSAGE_PATH"
log "server version $version"
