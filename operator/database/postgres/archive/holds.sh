# Applies the operator's holds on an archive's base backups with Barman's
# keep annotations (what barman-cloud-backup-keep writes): a kept backup is
# never deleted by barman-cloud-backup-delete, whatever the retention
# policy, and neither is the WAL a recovery from it needs.
#
# HOLDS_FILE (default: base-backup-holds beside this script, the key of
# the scripts ConfigMap the operator writes) holds one hold a line:
#   keep <backup ID> <why>   the backup is kept (target full) while listed
#   pause <why>              retention deletes nothing (expire.sh)
# A backup this script kept carries a second annotation, deckhand-hold
# (the why), so that it releases only its own keeps once the operator's
# list lets go: a keep somebody made with barman-cloud-backup-keep is
# never released here. A listed ID not in the archive is skipped.
#
# The environment: the store's settings (store.sh).
set -eu
here=$(dirname "$0")
. "$here/store.sh"
holds=${HOLDS_FILE:-$here/base-backup-holds}
trap store_cleanup EXIT
store_setup
# shellcheck disable=SC2086
HOLDS_FILE=$holds python3 - $store_endpoint "$store_url" "$STORE_SERVER" <<'PY'
import os, sys

from barman.clients.cloud_cli import UrlArgumentType, create_argument_parser
from barman.cloud import CloudBackupCatalog
from barman.cloud_providers import get_cloud_interface

parser, _, _ = create_argument_parser(description="deckhand", source_or_destination=UrlArgumentType.source)
config = parser.parse_args(sys.argv[1:])
catalog = CloudBackupCatalog(get_cloud_interface(config), config.server_name)
notes = catalog.annotation_manager
OURS = "deckhand-hold"

wanted = {}
try:
    with open(os.environ["HOLDS_FILE"]) as f:
        for line in f:
            kind, _, rest = line.strip().partition(" ")
            if kind == "keep" and rest:
                backup_id, _, why = rest.partition(" ")
                wanted[backup_id] = why or "held by the operator"
except FileNotFoundError:
    pass

for backup_id in sorted(catalog.get_backup_list()):
    ours = notes.get_annotation(backup_id, OURS)
    kept = catalog.get_keep_target(backup_id)
    if backup_id in wanted:
        if kept is None:
            catalog.keep_backup(backup_id, "full")
            notes.put_annotation(backup_id, OURS, wanted[backup_id])
            print("deckhand: base backup %s kept: %s" % (backup_id, wanted[backup_id]))
        elif ours is not None and ours != wanted[backup_id]:
            notes.put_annotation(backup_id, OURS, wanted[backup_id])
    elif ours is not None:
        if kept is not None:
            catalog.release_keep(backup_id)
        notes.delete_annotation(backup_id, OURS)
        print("deckhand: base backup %s released (was: %s)" % (backup_id, ours))
PY
