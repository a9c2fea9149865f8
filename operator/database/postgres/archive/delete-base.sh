# Deletes one base backup from an archive with barman-cloud-backup-delete
# --backup-id, which also deletes the WAL that only this backup needed
# (when it is the oldest). The operator runs it when a user deletes the
# backup's DatabaseBackup and none of its own holds keeps the backup.
#
# A backup not in the archive is not an error (deleted already: a Job run
# again). A keep deckhand made (holds.sh: the deckhand-hold annotation
# beside Barman's keep) is released first; a keep somebody made by hand
# (barman-cloud-backup-keep, no deckhand-hold annotation) is refused:
# whoever made it releases it.
#
# The environment: the store's settings (store.sh); BACKUP_ID, the
# backup's ID. The last line it prints on success is deleted=<ID>.
set -eu
here=$(dirname "$0")
. "$here/store.sh"
: "${BACKUP_ID:?BACKUP_ID is not set}"
case $BACKUP_ID in
  *[!A-Za-z0-9._-]*) store_fail "BACKUP_ID '$BACKUP_ID' is not a backup ID" ;;
esac
trap store_cleanup EXIT
store_setup
# Exit 3: not in the archive; 4: kept by hand.
rc=0
# shellcheck disable=SC2086
BACKUP_ID=$BACKUP_ID python3 - $store_endpoint "$store_url" "$STORE_SERVER" <<'PY' || rc=$?
import os, sys

from barman.clients.cloud_cli import UrlArgumentType, create_argument_parser
from barman.cloud import CloudBackupCatalog
from barman.cloud_providers import get_cloud_interface

parser, _, _ = create_argument_parser(description="deckhand", source_or_destination=UrlArgumentType.source)
config = parser.parse_args(sys.argv[1:])
catalog = CloudBackupCatalog(get_cloud_interface(config), config.server_name)
notes = catalog.annotation_manager
backup_id = os.environ["BACKUP_ID"]

if backup_id not in catalog.get_backup_list():
    sys.exit(3)
# Read without the annotation cache: one backup's two annotations.
kept = catalog.get_keep_target(backup_id, use_cache=False)
ours = notes.get_annotation(backup_id, "deckhand-hold", use_cache=False)
if kept is not None and ours is None:
    sys.exit(4)
if kept is not None:
    catalog.release_keep(backup_id)
if ours is not None:
    notes.delete_annotation(backup_id, "deckhand-hold")
    print("deckhand: base backup %s released (was: %s)" % (backup_id, ours.strip()), file=sys.stderr)
PY
case $rc in
  0) ;;
  3)
    echo "deckhand: base backup $BACKUP_ID is not in $store_url/$STORE_SERVER: nothing to delete" >&2
    exit 0
    ;;
  4) store_fail "base backup $BACKUP_ID of $store_url/$STORE_SERVER has a keep that deckhand did not make: release it with barman-cloud-backup-keep --release to delete it" ;;
  *) store_fail "could not read base backup $BACKUP_ID of $store_url/$STORE_SERVER (exit $rc)" ;;
esac
# shellcheck disable=SC2086
barman-cloud-backup-delete $store_endpoint --backup-id "$BACKUP_ID" "$store_url" "$STORE_SERVER"
echo "deleted=$BACKUP_ID"
