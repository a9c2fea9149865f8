#!/bin/sh
# deckhand: the major-version upgrade Job of a MySQL or MariaDB cluster.
#
# Runs with the new image while no server runs, on the primary's data
# volume: checks the pre-upgrade dump's checksum, initialises a new data
# directory beside the old one, loads the dump into it and swaps them. The
# old directory is kept as DATA_DIR.deckhand-old-FROM_VERSION until the
# server starts with REMOVE_OLD_DATA=true (the operator sets it once the new
# primary has been ready); a run interrupted before the swap leaves
# DATA_DIR as it was.
#
# Writes {"serverVersion": "..."} (the new server's) to the termination
# message.
#
# Environment (set by the Job): DATA_DIR, MYSQL_UNIX_PORT, MYSQL_PWD,
# REPLICATION_PASSWORD, BACKUP_DIR, BACKUP_FILE, BACKUP_SHA256,
# FROM_VERSION, TO_VERSION, TERMINATION_MESSAGE_PATH.
set -eu
. "$(dirname "$0")/lib.sh"
pick_commands

version=$(server_version)
old=$DATA_DIR.deckhand-old-$FROM_VERSION
new=$DATA_DIR.deckhand-upgrade
if [ -d "$old/mysql" ] && [ -d "$DATA_DIR/mysql" ]; then
	log "$DATA_DIR was already swapped with $old: nothing to do"
	report serverVersion="$version"
	exit 0
fi
check_sha256 "$BACKUP_DIR/$BACKUP_FILE" "$BACKUP_SHA256"
log "upgrading $FROM_VERSION -> $TO_VERSION ($version): new data directory $new"
rm -rf "$new"
initialise "$new"
start_private "$new" 0
{
	sql_accounts "$version" "$MYSQL_PWD" "$REPLICATION_PASSWORD"
	cat "$BACKUP_DIR/$BACKUP_FILE"
} | as_root_without_password
stop_private
series "$version" >"$new/$SERIES_FILE"
mv "$DATA_DIR" "$old"
mv "$new" "$DATA_DIR"
report serverVersion="$version"
log "swapped: $DATA_DIR is $version, the old directory is $old"
