# A resident Barman Cloud process: ships the WAL wal-archive.sh hands it
# (mode archive, Barman's CloudWalUploader: what barman-cloud-wal-archive
# runs) or fetches what wal-restore.sh asks for (mode restore,
# CloudWalDownloader: what barman-cloud-wal-restore runs), in one process
# that imports Barman and boto3 once and keeps its connections to the
# store. A barman-cloud-wal-* process per file spends about 0.75 CPU-s
# starting Python, boto3 and a TLS session; here a 16 MiB segment costs
# about 0.25 (docs/design/database-backup.md).
#
#   sh wal-resident.sh archive|restore <dir>
#
# The store's settings come from the environment (store.sh); <dir> is a
# private directory the scripts write requests into (store.sh's
# resident_call): <id>.up holds, in mode archive, the absolute path of a
# segment or history file; in mode restore, the name of the file to fetch
# and the absolute path to write it to, a line each. The request is taken
# by renaming it <id>.taken and answered <id>.rc: the exit code the
# barman-cloud-wal-* command would have given (0; 1 not in the archive,
# restore only; 2 the store did not answer; 3 not a WAL file name; 4 any
# other failure) on the first line, what Barman logged about it after.
# Several requests are served at once (the archiver's maxParallel), each
# with a cloud interface of its own: boto3's resources are not
# thread-safe.
#
# It writes its pid into <dir>/pid once it serves; the scripts hand it
# nothing while that process is not alive, and run Barman Cloud's command
# themselves instead. When the keys or the CA bundle change (a rotated
# Secret), it answers what it has taken and exits 75: the archiver starts
# it again with the new files (store.sh reads them at start).
set -eu
here=$(dirname "$0")
. "$here/store.sh"
[ $# -eq 2 ] || store_fail "usage: wal-resident.sh archive|restore <dir>"
case $1 in
  archive | restore) ;;
  *) store_fail "wal-resident.sh: mode '$1' is not archive or restore" ;;
esac
trap store_cleanup EXIT
store_setup
# A fetched file's compression is read from its name.
[ "$1" = archive ] || store_compress=
# Python runs as a child, so that the keys' files are removed when it
# ends; a TERM or INT (the archiver stopping) is passed on to it.
# shellcheck disable=SC2086 # the flags are single words or empty
python3 - "$1" "$2" $store_endpoint $store_compress "$store_url" "$STORE_SERVER" <<'PY' &
import hashlib, logging, os, queue, sys, threading, time

from barman.clients import cloud_walarchive, cloud_walrestore
from barman.cloud import configure_logging
from barman.cloud_providers import get_cloud_interface
from barman.utils import force_str
from barman.xlog import is_any_xlog_file, is_history_file

mode, box = sys.argv[1], sys.argv[2]
if mode == "archive":
    config = cloud_walarchive.parse_arguments(sys.argv[3:])
else:
    # The file's name and destination are each request's.
    config = cloud_walrestore.parse_arguments(sys.argv[3:] + ["000000010000000000000001", os.devnull])
configure_logging(config)


class ByThread(logging.Handler):
    """Keeps what Barman logs while a thread serves a request, for its answer."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.lines = {}

    def emit(self, record):
        self.lines.setdefault(threading.get_ident(), []).append(self.format(record))

    def take(self):
        return "\n".join(self.lines.pop(threading.get_ident(), []))


said = ByThread()
logging.getLogger().addHandler(said)


def settings():
    """A digest of the files store.sh read at start: the keys and CA bundle."""
    h = hashlib.sha256()
    for name in ("STORE_ACCESS_KEY_FILE", "STORE_SECRET_KEY_FILE", "STORE_CA_FILE"):
        try:
            with open(os.environ[name], "rb") as f:
                h.update(f.read())
        except (KeyError, OSError):
            h.update(b"-")
        h.update(b"\0")
    return h.digest()


# Cloud interfaces not in use; one is made when none is free.
idle = queue.SimpleQueue()


def archive(ci, path):
    ci.setup_bucket()
    extra = {"override_tags": config.history_tags} if is_history_file(path) else {}
    cloud_walarchive.CloudWalUploader(
        cloud_interface=ci, server_name=config.server_name, compression=config.compression
    ).upload_wal(path, **extra)


def restore(ci, name, dest):
    if not ci.bucket_exists:
        logging.error("Bucket %s does not exist", ci.bucket_name)
        sys.exit(1)
    # Exits 1 (SystemExit) when the archive does not hold the file.
    cloud_walrestore.CloudWalDownloader(cloud_interface=ci, server_name=config.server_name).download_wal(name, dest)


def serve(args):
    name = os.path.basename(args[0])
    if not is_any_xlog_file(name):
        return 3, "%s is an invalid name for a WAL file" % name
    try:
        ci = idle.get_nowait()
    except queue.Empty:
        ci = None
    try:
        if ci is None:
            ci = get_cloud_interface(config)
        if not ci.test_connectivity():
            return 2, said.take() or "the store did not answer"
        rc = 0
        try:
            if mode == "archive":
                archive(ci, args[0])
            else:
                restore(ci, name, args[1])
        except SystemExit as e:
            rc = e.code
        idle.put(ci)
        ci = None
        return rc, said.take()
    except Exception as exc:
        logging.error("Barman cloud WAL %s exception: %s", "archiver" if mode == "archive" else "restore", force_str(exc))
        return 4, said.take()
    finally:
        # An interface that failed is not used again: a fresh one
        # starts from a new session.
        if ci is not None:
            ci.close()


def answer(request):
    rc, what = 4, ""
    try:
        with open(os.path.join(box, request + ".taken")) as f:
            rc, what = serve(f.read().splitlines())
    finally:
        tmp = os.path.join(box, "." + request + ".rc")
        with open(tmp, "w") as f:
            f.write("%d\n%s\n" % (rc, what))
        os.rename(tmp, os.path.join(box, request + ".rc"))
        os.unlink(os.path.join(box, request + ".taken"))


def swept():
    """Answers nobody waits for any more: the script ran Barman Cloud
    itself when this process was not alive."""
    now = time.time()
    try:
        for e in os.scandir(box):
            if e.name.endswith(".rc") and now - e.stat().st_mtime > 600:
                os.unlink(e.path)
    except FileNotFoundError:
        pass  # taken meanwhile, or the directory is gone (below)


started = settings()
pid = os.path.join(box, "pid")
with open(pid + ".tmp", "w") as f:
    f.write("%d\n" % os.getpid())
os.rename(pid + ".tmp", pid)
serving = []
looked = time.monotonic()
while True:
    # The files and stale answers every 5 s, requests every 0.1 s: at
    # rest, about 0.3% of a core.
    if time.monotonic() - looked >= 5:
        looked = time.monotonic()
        if settings() != started:
            os.unlink(pid)  # nothing more is handed to this process
            break
        swept()
        serving = [t for t in serving if t.is_alive()]
    try:
        requests = list(os.scandir(box))
    except FileNotFoundError:
        sys.exit(0)  # the archiver is gone, and its directory with it
    for e in requests:
        if not e.name.endswith(".up"):
            continue
        request = e.name[: -len(".up")]
        try:
            os.rename(e.path, os.path.join(box, request + ".taken"))
        except FileNotFoundError:
            continue  # withdrawn
        t = threading.Thread(target=answer, args=(request,))
        t.start()
        serving.append(t)
    time.sleep(0.1)
print("deckhand: the store's keys or CA bundle changed; the resident Barman Cloud process starts again with them", file=sys.stderr)
for t in serving:
    t.join()
sys.exit(75)
PY
child=$!
trap 'kill "$child" 2>/dev/null' TERM INT
rc=0
wait "$child" || rc=$?
# A signal ends the first wait early; the second has its exit status.
if kill -0 "$child" 2>/dev/null || [ "$rc" -gt 128 ]; then
  rc=0
  wait "$child" || rc=$?
fi
exit "$rc"
