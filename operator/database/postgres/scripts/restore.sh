#!/bin/sh
# deckhand: the restore Job of a PostgreSQL Database created from a
# backup (spec.fromBackup). It runs before the init Job.
#
# Checks the dump's SHA-256 against BACKUP_SHA256 first and refuses a
# mismatch; waits for the primary; restores into APP_DATABASE, created if
# missing and owned by APP_USER. The role is created if missing, LOGIN
# without a password: nobody can log in as it until the init Job gives it
# the app Secret's password (init.sh sets a password on a role that has
# none, and only then).
#
# One transaction, at most once (see restore_app_database in lib.sh): a
# retried Job finds the database marked as restored from this backup and
# succeeds without touching it; a database that holds anything else is
# refused, never cleaned.
#
# Writes {"serverVersion"} to the termination message.
#
# Uses only what PostgreSQL 15 to 18 share; a dump restores into the same
# or a later major version, not an earlier one.
#
# Environment (set by the Job): PRIMARY_HOST, PRIMARY_PORT, PGUSER and
# PGPASSWORD (the superuser), APP_DATABASE, APP_USER, BACKUP_DIR,
# BACKUP_FILE (relative to BACKUP_DIR), BACKUP_SHA256,
# TERMINATION_MESSAGE_PATH; SERVER_WAIT_SECONDS (default 600).
set -eu
. "$(dirname "$0")/lib.sh"

export PGHOST="$PRIMARY_HOST" PGPORT="$PRIMARY_PORT" PGDATABASE=postgres PGCONNECT_TIMEOUT=5
tls_client_env

file=$BACKUP_DIR/$BACKUP_FILE
check_sha256 "$file" "$BACKUP_SHA256"
wait_for_server
restore_app_database "$file" "$BACKUP_SHA256"

version=$(psql -X -A -t -v ON_ERROR_STOP=1 -c 'SHOW server_version')
printf '{"serverVersion":%s}\n' "$(json_string "$version")" >"$TERMINATION_MESSAGE_PATH"
log "server version $version"
