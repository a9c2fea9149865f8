# The init container of a server pod of a Database that recovers from an
# archive (spec.recovery): on the pod the operator names the primary, while
# the recovery is pending, fills the empty data directory with recover.sh
# (a base backup and the recovery settings). bootstrap.sh, in the server's
# container, then replays the archive to the target and promotes before
# the server serves. Every other case does nothing: a standby clones the
# primary once it serves, and a data directory that exists is never
# recovered over.
#
# The environment: recover.sh's (the source archive's settings as STORE_*,
# the target, PGDATA, RESTORE_COMMAND) and POD_NAME. Beside this script
# (the scripts ConfigMap): "primary", the pod the operator names the
# primary, and "recovery", "pending" until the operator has seen the
# recovered primary serve (then "done": a primary whose volume is emptied
# later starts empty, never from the source archive's old data).
#
# recover.sh fills a directory beside PGDATA that is renamed into place
# once it is complete, so a recovery cut off part way leaves nothing that
# looks like a data directory, and is started again from the beginning.
set -eu
here=$(dirname "$0")
fail() {
  echo "deckhand: $*" >&2
  exit 1
}
: "${PGDATA:?PGDATA is not set}" "${POD_NAME:?POD_NAME is not set}"
named=$(cat "$here/primary" 2>/dev/null || true)
if [ "$POD_NAME" != "$named" ]; then
  echo "deckhand: $POD_NAME is not the primary (${named:-none named}): nothing to recover here; it clones the primary" >&2
  exit 0
fi
state=$(cat "$here/recovery" 2>/dev/null || true)
if [ "$state" != pending ]; then
  echo "deckhand: the recovery is ${state:-not asked for}: nothing to recover" >&2
  exit 0
fi
if [ -s "$PGDATA/PG_VERSION" ]; then
  echo "deckhand: $PGDATA holds a data directory: not recovering over it (bootstrap.sh finishes a recovery under way)" >&2
  exit 0
fi
if [ -d "$PGDATA" ] && [ -n "$(ls -A "$PGDATA")" ]; then
  fail "$PGDATA is not empty but holds no data directory (no PG_VERSION): refusing to recover over it"
fi
staging=$PGDATA.deckhand-recover
rm -rf "$staging"
PGDATA=$staging sh "$here/recover.sh"
# Into place only where nothing is: mv onto a directory would move the
# new one inside it.
if [ -e "$PGDATA" ] && ! rmdir "$PGDATA" 2>/dev/null; then
  fail "$PGDATA is no longer empty (something wrote it while $staging was filled): not moving $staging over it"
fi
mv "$staging" "$PGDATA"
echo "deckhand: $PGDATA holds the base backup and the recovery settings; the server replays the archive to the target when it starts" >&2
