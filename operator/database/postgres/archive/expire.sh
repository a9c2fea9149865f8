# Applies an archive's retention policy with barman-cloud-backup-delete:
# the base backups that no recovery within the policy needs are deleted,
# and with them the WAL that only they needed. Barman never deletes the
# backups a recovery to any point of the window starts from.
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
trap store_cleanup EXIT
store_setup
# shellcheck disable=SC2086
barman-cloud-backup-delete $store_endpoint --retention-policy "$RETENTION_POLICY" "$store_url" "$STORE_SERVER"
echo "deckhand: retention $RETENTION_POLICY applied to $store_url/$STORE_SERVER" >&2
