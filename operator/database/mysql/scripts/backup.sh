#!/bin/sh
# deckhand: a backup Job of a MySQL or MariaDB cluster.
#
# Dumps every user database (not the server's own: accounts belong to the
# cluster that loads the dump, whose Secret and init Job make them) with
# the image's own dump tool, in one transaction (--single-transaction: a
# consistent snapshot of InnoDB tables without locking writers), from the
# source server (a ready replica when there is one). The dump is written
# under a temporary name (FILE.partial), checksummed as it is written,
# checked to be complete (the dump tool's last line), fsynced and only
# then renamed to FILE:
# a file named FILE is always a complete dump, and a killed Job leaves at
# most a .partial file.
#
# The file is bound to the Job that wrote it: FILE.owner, written before
# the rename, holds BACKUP_JOB_UID. A FILE that exists when the Job starts
# is reported only when its .owner names this Job (a retry after the
# rename); otherwise the Job fails and leaves the file alone.
#
# Beside the dump, FILE.counts (engine.CountsSuffix) holds each table's
# row count, "<database>.<table>\t<rows>", sorted: counted from the dump's
# own stream as it is written (count_rows in lib.sh), so they are exactly
# the rows the dump's snapshot held. Written, fsynced and renamed into
# place before the dump is: a FILE always has its counts.
#
# Writes {"file", "size", "sha256", "serverVersion", "tables", "rows"} to
# the termination message.
#
# Environment (set by the Job): SOURCE_HOST, SOURCE_PORT, MYSQL_PWD
# (root's password), BACKUP_DIR (the backup volume), BACKUP_FILE (relative
# to it), BACKUP_JOB_UID, TERMINATION_MESSAGE_PATH; PRIMARY_WAIT_SECONDS (default 600);
# with TLS, TLS_CA_FILE (lib.sh).
set -eu
. "$(dirname "$0")/lib.sh"
pick_commands

# The fastest awk the image has counts the rows (MariaDB's images: mawk).
AWK=$(command -v mawk || command -v awk)
final=$BACKUP_DIR/$BACKUP_FILE
partial=$final.partial
owner=$final.owner
counts=$final.counts
counts_partial=$counts.partial
failed=$final.failed
mkdir -p "$(dirname "$final")"
rm -f "$partial" "$counts_partial" "$failed"
# Records and counts of files that are gone (deleted with their backup, or
# a Job stopped between them and the dump's rename).
for record in "$(dirname "$final")"/*.owner "$(dirname "$final")"/*.counts; do
	[ -e "$record" ] || continue
	[ -e "${record%.*}" ] || rm -f "$record"
done
# A file under this backup's name is this backup's result only when this
# Job wrote it (an earlier attempt stopped after the rename): it is
# reported again, never rewritten. Anything else is refused and left as it
# is: overwriting or reporting it would make another backup's file, or an
# old dump, look like this backup.
if [ -e "$final" ]; then
	written_by=$(cat "$owner" 2>/dev/null || true)
	if [ -n "${BACKUP_JOB_UID:-}" ] && [ "$written_by" = "$BACKUP_JOB_UID" ]; then
		log "$final exists: an earlier attempt of this Job ($BACKUP_JOB_UID) completed it"
		wait_for "$SOURCE_HOST" "$SOURCE_PORT"
		version=$(query "$SOURCE_HOST" "$SOURCE_PORT" 'SELECT VERSION()')
		set --
		if [ -f "$counts" ]; then
			summary=$(counts_summary "$counts")
			set -- tables="${summary% *}" rows="${summary#* }"
		fi
		report file="$BACKUP_FILE" size="$(wc -c <"$final" | tr -d ' ')" sha256="$(sha256sum "$final" | cut -d ' ' -f 1)" serverVersion="$version" "$@"
		exit 0
	fi
	log "$final exists, but this backup did not write it (${written_by:+written by Job $written_by, }this is Job ${BACKUP_JOB_UID:-of unknown UID}): refusing to report a file this backup did not write; it is left as it is"
	exit 1
fi
stream=$(mktemp -d)
trap 'rm -rf "$partial" "$counts_partial" "$counts_partial.unsorted" "$failed" "$stream"' EXIT INT TERM

wait_for "$SOURCE_HOST" "$SOURCE_PORT"
version=$(query "$SOURCE_HOST" "$SOURCE_PORT" 'SELECT VERSION()')
dbs=$(databases_of "$SOURCE_HOST" "$SOURCE_PORT")
set --
while IFS= read -r db; do
	if [ -n "$db" ]; then set -- "$@" "$db"; fi
done <<LIST
$dbs
LIST
gtid=
if [ "$(flavor "$version")" = mysql ]; then
	# The dump restores into another cluster, whose GTID history is its own.
	gtid=--set-gtid-purged=OFF
fi
log "dumping $# database(s) from $SOURCE_HOST:$SOURCE_PORT ($version)"
if [ $# -gt 0 ]; then
	# The dump is written, checksummed and counted in one pass (the
	# checksum through a FIFO in a directory of the Job's own); a failure
	# of the dump tool or of the write is recorded in $failed (a
	# pipeline's status is its last command's).
	mkfifo "$stream/sum"
	sha256sum <"$stream/sum" >"$stream/sha256" &
	summing=$!
	# shellcheck disable=SC2046 # one option per line
	{ "$DUMP" -h "$SOURCE_HOST" -P "$SOURCE_PORT" -uroot $(tls_client_args) --single-transaction \
		--routines --events --triggers --hex-blob $gtid \
		--databases -- "$@" || echo "the dump tool failed ($?)" >>"$failed"; } |
		{ tee "$partial" "$stream/sum" || echo "writing $partial failed" >>"$failed"; } |
		count_rows >"$counts_partial.unsorted"
	wait "$summing" || echo "the checksum failed" >>"$failed"
	if [ -s "$failed" ]; then
		log "$(cat "$failed")"
		exit 1
	fi
	if ! tail -n 1 "$partial" | grep -q '^-- Dump completed'; then
		log "the dump tool exited without finishing the dump"
		exit 1
	fi
	LC_ALL=C sort -o "$counts_partial" "$counts_partial.unsorted"
	rm -f "$counts_partial.unsorted"
else
	printf -- '-- deckhand: %s held no databases\n-- Dump completed on %s\n' \
		"$SOURCE_HOST" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" >"$partial"
	: >"$counts_partial"
	sha256sum <"$partial" >"$stream/sha256"
fi
summary=$(counts_summary "$counts_partial")
sync "$partial" "$counts_partial"
mv "$counts_partial" "$counts"
sum=$(cut -d ' ' -f 1 "$stream/sha256")
size=$(wc -c <"$partial" | tr -d ' ')
printf '%s\n' "${BACKUP_JOB_UID:-}" >"$owner"
sync "$owner" "$(dirname "$final")"
mv "$partial" "$final"
sync "$(dirname "$final")"
trap - EXIT INT TERM
rm -rf "$stream"
report file="$BACKUP_FILE" size="$size" sha256="$sum" serverVersion="$version" tables="${summary% *}" rows="${summary#* }"
log "wrote $BACKUP_FILE: $size bytes, sha256 $sum; ${summary% *} table(s), ${summary#* } row(s)"
