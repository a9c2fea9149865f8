#!/bin/sh
# deckhand: a backup Job of a PostgreSQL Database.
#
# Dumps APP_DATABASE with the server image's own pg_dump (custom format:
# compressed, restored with pg_restore) from SOURCE_HOST (a ready standby,
# else the primary), as the superuser.
#
# What a dump holds: the database's schemas, tables, data, sequences (with
# their values), functions, extensions' CREATE EXTENSION. What it does not
# hold: roles and their passwords, grants to roles, and settings of the
# database itself (globals live outside a database). A restore recreates
# the Database's own roles from its Secrets and makes the app role own
# everything; roles created by hand are listed in this Job's log as not
# kept.
#
# The dump is written as BACKUP_FILE.partial, fsynced, checksummed and only
# then renamed to BACKUP_FILE (and the directory fsynced): a file named
# BACKUP_FILE is always complete. A killed Job leaves only a .partial file,
# which the next backup removes.
#
# Writes {"serverVersion","file","size","sha256"} to the termination
# message.
#
# Uses only what PostgreSQL 15 to 18 share.
#
# Environment (set by the Job): SOURCE_HOST, SOURCE_PORT, PGUSER and
# PGPASSWORD (the superuser), APP_DATABASE, BACKUP_DIR, BACKUP_FILE
# (relative to BACKUP_DIR), TERMINATION_MESSAGE_PATH; SERVER_WAIT_SECONDS
# (default 600).
set -eu
. "$(dirname "$0")/lib.sh"

export PGHOST="$SOURCE_HOST" PGPORT="$SOURCE_PORT" PGDATABASE=postgres PGCONNECT_TIMEOUT=5

target=$BACKUP_DIR/$BACKUP_FILE
dir=$(dirname "$target")
partial=$target.partial
mkdir -p "$dir"

# Dumps of earlier Jobs that were killed: one backup runs at a time per
# Database (the operator sees to it), so none of them is still written.
for stale in "$dir"/*.partial; do
	[ -e "$stale" ] || continue
	log "removing $stale, left by a backup that did not finish"
	rm -f "$stale"
done

wait_for_server
version=$(psql -X -A -t -v ON_ERROR_STOP=1 -c 'SHOW server_version')

# report SIZE SHA256: the Report of the complete file $target.
report() {
	size=$1 sha256=$2
	log "$target: $size bytes, SHA-256 $sha256"
	printf '{"serverVersion":%s,"file":%s,"size":%s,"sha256":%s}\n' \
		"$(json_string "$version")" "$(json_string "$BACKUP_FILE")" "$size" "$(json_string "$sha256")" >"$TERMINATION_MESSAGE_PATH"
}

# Only a complete dump bears the final name: an earlier attempt of this
# Job that was stopped after the rename wrote it. It is kept, never
# overwritten.
if [ -e "$target" ]; then
	log "$target exists: an earlier attempt of this backup completed it"
	report "$(stat -c %s "$target")" "$(sha256_of "$target")"
	exit 0
fi

# A dump holds one database, not roles: say which roles it leaves out.
others=$(psql -X -A -t -v ON_ERROR_STOP=1 <<-'SQL'
\getenv appdb APP_DATABASE
SELECT string_agg(quote_ident(rolname), ', ' ORDER BY rolname) FROM pg_catalog.pg_roles
 WHERE rolname !~ '^pg_' AND rolname <> current_user
   AND rolname <> (SELECT pg_catalog.pg_get_userbyid(datdba) FROM pg_catalog.pg_database WHERE datname = :'appdb')
SQL
)
[ -z "$others" ] || log "roles besides the superuser and the database's owner exist ($others): a backup holds no roles, so a restore does not recreate them or their grants"

log "dumping database $APP_DATABASE from $PGHOST:$PGPORT (PostgreSQL $version) to $partial"
trap 'rm -f "$partial"' EXIT
pg_dump --format=custom --no-password --file="$partial" --dbname="$(app_dbname)"
# The data reaches the disk before the name that says it is complete.
sync "$partial"
size=$(stat -c %s "$partial")
sha256=$(sha256_of "$partial")
mv "$partial" "$target"
trap - EXIT
sync "$dir"
report "$size" "$sha256"
