#!/bin/sh
# deckhand: the restore Job of a MySQL or MariaDB cluster (fromBackup).
#
# Checks the dump's checksum against the one its backup recorded and
# refuses a mismatch, then loads it into the primary (before the init Job:
# the restored databases are the cluster's). The load is written to the
# binary log, so the replicas receive it too.
#
# Writes {"serverVersion": "..."} to the termination message.
#
# Environment (set by the Job): PRIMARY_HOST, PRIMARY_PORT, MYSQL_PWD
# (root's password), BACKUP_DIR, BACKUP_FILE, BACKUP_SHA256,
# TERMINATION_MESSAGE_PATH; PRIMARY_WAIT_SECONDS (default 600); with TLS,
# TLS_CA_FILE (lib.sh).
set -eu
. "$(dirname "$0")/lib.sh"
pick_commands

file=$BACKUP_DIR/$BACKUP_FILE
check_sha256 "$file" "$BACKUP_SHA256"
wait_for "$PRIMARY_HOST" "$PRIMARY_PORT"
version=$(query "$PRIMARY_HOST" "$PRIMARY_PORT" 'SELECT VERSION()')
log "loading $BACKUP_FILE into $PRIMARY_HOST:$PRIMARY_PORT ($version)"
remote "$PRIMARY_HOST" "$PRIMARY_PORT" <"$file"
report serverVersion="$version"
log "restored $BACKUP_FILE"
