# Applies an archive's retention policy with barman-cloud-backup-delete:
# the base backups that no recovery within the policy needs are deleted,
# and with them the WAL that only they needed. Barman never deletes the
# backups a recovery to any point of the window starts from, nor a kept
# one: the operator's holds (holds.sh) are applied first, and a hold
# that cannot be applied deletes nothing. While the holds list a pause
# (a Database recovers from this archive), nothing is deleted.
#
# The environment: the store's settings (store.sh); RETENTION_POLICY,
# Barman's policy: "RECOVERY WINDOW OF 30 DAYS" (what
# objectStore.retentionPolicy 30d becomes; WEEKS and MONTHS too) or
# "REDUNDANCY 3" (keep the three newest).
set -eu
here=$(dirname "$0")
. "$here/store.sh"
: "${RETENTION_POLICY:?RETENTION_POLICY is not set}"
case $RETENTION_POLICY in
  "REDUNDANCY "[1-9]* | "RECOVERY WINDOW OF "[1-9]*" DAYS" | "RECOVERY WINDOW OF "[1-9]*" WEEKS" | "RECOVERY WINDOW OF "[1-9]*" MONTHS") ;;
  *) store_fail "RETENTION_POLICY is '$RETENTION_POLICY', not REDUNDANCY <n> or RECOVERY WINDOW OF <n> DAYS|WEEKS|MONTHS" ;;
esac
holds=${HOLDS_FILE:-$here/base-backup-holds}
if [ -f "$holds" ] && pause=$(sed -n 's/^pause //p' "$holds" | head -n 1) && [ -n "$pause" ]; then
  echo "deckhand: retention paused, nothing deleted: $pause" >&2
  exit 0
fi
HOLDS_FILE=$holds sh "$here/holds.sh" >&2
trap store_cleanup EXIT
store_setup
# shellcheck disable=SC2086
barman-cloud-backup-delete $store_endpoint --retention-policy "$RETENTION_POLICY" "$store_url" "$STORE_SERVER"
echo "deckhand: retention $RETENTION_POLICY applied to $store_url/$STORE_SERVER" >&2
