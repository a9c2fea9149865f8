package postgres_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deckhand-dev/deckhand/operator/database/engine"
	"github.com/deckhand-dev/deckhand/operator/database/postgres"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/pgtest"
)

// verify runs a verification Job of file on backupVolume with a scratch
// volume of its own, and checks that nothing is left in the scratch
// volume afterwards, whatever the outcome.
func (h *host) verify(backupVolume, file, sha256, userCheck string) (engine.Report, string, error) {
	h.t.Helper()
	pod := postgres.Engine{}.VerifyPod(h.cluster, engine.Verify{File: file, SHA256: sha256, ClaimName: "backup", UserCheck: userCheck})
	n := strconv.FormatInt(scratchCount.Add(1), 10)
	scratch := h.volume("scratch-" + n)
	report, out, err := h.job(pod, "verify-"+n, pgtest.FreePort(h.t), map[string]string{
		engine.BackupVolume: h.volume(backupVolume), engine.ScratchVolume: scratch,
	})
	left, rerr := os.ReadDir(scratch)
	require.NoError(h.t, rerr)
	assert.Empty(h.t, left, "the scratch cluster is removed whatever the outcome:\n%s", out)
	return report, out, err
}

// scratchCount numbers verification pods: each has its own scratch
// volume and termination message.
var scratchCount atomic.Int64

// checkNames are a verification's checks as "name:passed".
func checkNames(v *engine.Verification) []string {
	var names []string
	for _, c := range v.Checks {
		names = append(names, c.Name+map[bool]string{true: ":passed", false: ":failed"}[c.Passed])
	}
	return names
}

// A verification of a good backup passes every check; each way a backup
// can be wrong fails the check that catches it, named, with why. The
// verifications run side by side, as pods of their own would.
func TestAVerificationPassesAGoodBackupAndNamesTheCheckThatFailed(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	source := h.primary("data-source")
	h.init(source.Port)
	out, err := h.appSQL(source.Port, appData)
	require.NoError(t, err, out)
	good, out, err := h.backup(source.Port, "backup", "good.dump")
	require.NoError(t, err, out)
	counts, err := os.ReadFile(filepath.Join(h.volume("backup"), "good.dump"+engine.CountsSuffix))
	require.NoError(t, err, "the counts are written beside the dump")
	assert.Equal(t, "billing.invoices\t7\npublic.customers\t51\npublic.orders\t490\n", string(counts))
	assert.Equal(t, 3, good.Tables)
	assert.EqualValues(t, 7+51+490, good.Rows)
	// A second dump of other data: 10 more orders.
	out, err = h.appSQL(source.Port, "INSERT INTO orders (customer, item) SELECT 1, 'later ' || g FROM generate_series(1, 10) g")
	require.NoError(t, err, out)
	h.jobUID = "job-uid-2"
	later, out, err := h.backup(source.Port, "backup", "later.dump")
	require.NoError(t, err, out)

	dir := h.volume("backup")
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		return b
	}
	// write puts a file on the backup volume and returns its checksum.
	write := func(name string, b []byte) string {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), b, 0o644))
		return fileSHA256(t, filepath.Join(dir, name))
	}
	dump := read("good.dump")

	corrupted := append([]byte(nil), dump...)
	corrupted[len(corrupted)/2] ^= 0xff
	write("corrupted.dump", corrupted)
	write("corrupted.dump"+engine.CountsSuffix, counts)

	truncatedSHA := write("truncated.dump", dump[:len(dump)*2/3])
	write("truncated.dump"+engine.CountsSuffix, counts)

	alteredSHA := write("altered.dump", dump)
	write("altered.dump"+engine.CountsSuffix, []byte(strings.Replace(string(counts), "public.orders\t490", "public.orders\t491", 1)))

	// The later dump with the good dump's counts and a checksum recorded
	// for it: the file is intact, its data is not what was counted.
	changedSHA := write("changed.dump", read("later.dump"))
	write("changed.dump"+engine.CountsSuffix, counts)

	noCountsSHA := write("nocounts.dump", dump)

	t.Run("good backup", func(t *testing.T) {
		t.Parallel()
		h := h.on(t)
		// The user check runs as the app role, which is no superuser.
		verified, out, err := h.verify("backup", good.File, good.SHA256,
			"SELECT count(*) = 490 AND NOT (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) FROM orders")
		require.NoError(t, err, out)
		require.NotNil(t, verified.Verification, out)
		assert.Equal(t, []string{"checksum:passed", "restore:passed", "rowCounts:passed", "userCheck:passed"}, checkNames(verified.Verification), out)
		assert.Nil(t, verified.Verification.Failed())
		assert.Equal(t, 3, verified.Verification.Tables)
		assert.EqualValues(t, 548, verified.Verification.Rows)
		assert.True(t, strings.HasPrefix(verified.Version(), pgtest.Major(h.bin)+"."), verified.ServerVersion)
	})
	t.Run("good backup, no user check", func(t *testing.T) {
		t.Parallel()
		h := h.on(t)
		verified, out, err := h.verify("backup", later.File, later.SHA256, "")
		require.NoError(t, err, out)
		assert.Equal(t, []string{"checksum:passed", "restore:passed", "rowCounts:passed"}, checkNames(verified.Verification), out)
	})
	for _, tc := range []struct {
		name, file, sha256, userCheck string
		failed                        string
		message                       []string
	}{
		{"corrupted file", "corrupted.dump", good.SHA256, "", engine.CheckChecksum,
			[]string{"the backup recorded " + good.SHA256, "damaged"}},
		{"missing file", "gone.dump", good.SHA256, "", engine.CheckChecksum, []string{"not found"}},
		{"truncated file with a checksum of its own", "truncated.dump", truncatedSHA, "", engine.CheckRestore,
			[]string{"pg_restore"}},
		{"altered counts", "altered.dump", alteredSHA, "", engine.CheckRowCounts,
			[]string{"public.orders: 491 recorded, 490 restored"}},
		{"data changed, checksum re-recorded", "changed.dump", changedSHA, "", engine.CheckRowCounts,
			[]string{"public.orders: 490 recorded, 500 restored"}},
		{"no counts recorded", "nocounts.dump", noCountsSHA, "", engine.CheckRowCounts,
			[]string{"no row counts were recorded"}},
		{"user check returns false", "good.dump", good.SHA256, "SELECT count(*) > 1000 FROM orders", engine.CheckUser,
			[]string{`returned "f", not true`}},
		{"user check fails", "good.dump", good.SHA256, "SELECT * FROM no_such_table", engine.CheckUser,
			[]string{"the query failed", "no_such_table"}},
		{"user check may not write", "good.dump", good.SHA256, "DELETE FROM orders RETURNING true", engine.CheckUser,
			[]string{"read-only transaction"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Each verification is a pod of its own: a scratch volume and
			// a port of its own.
			t.Parallel()
			h := h.on(t)
			report, out, err := h.verify("backup", tc.file, tc.sha256, tc.userCheck)
			require.NoError(t, err, "a failed check is a verification that ran:\n%s", out)
			require.NotNil(t, report.Verification, out)
			failed := report.Verification.Failed()
			require.NotNil(t, failed, "%v\n%s", checkNames(report.Verification), out)
			assert.Equal(t, tc.failed, failed.Name, out)
			for _, m := range tc.message {
				assert.Contains(t, failed.Message, m)
			}
			last := report.Verification.Checks[len(report.Verification.Checks)-1]
			assert.Equal(t, tc.failed, last.Name, "the checks stop at the first that fails")
		})
	}
	assert.EqualValues(t, 548+10, later.Rows)
}

// Rows written while a backup runs are in neither the dump nor its counts:
// both read the snapshot the backup exported before it started. The counts
// are taken alongside the dump, table by table: a lock held on the first
// table stops both there while rows are added to a later one; counting and dumping in
// snapshots of their own would see different rows, and the verification
// would fail.
func TestTheCountsAreTakenInTheDumpsOwnSnapshot(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	source := h.primary("data-source")
	h.init(source.Port)
	out, err := h.appSQL(source.Port, appData)
	require.NoError(t, err, out)

	release := holdLock(t, h, source.Port, "billing.invoices")
	type result struct {
		report engine.Report
		out    string
		err    error
	}
	done := make(chan result, 1)
	go func() {
		pod := postgres.Engine{}.BackupPod(h.cluster, engine.Backup{File: "during.dump", Host: h.cluster.Name + "-1", ClaimName: "backup"})
		env := h.env(pod, "backup", source.Port, map[string]string{engine.BackupVolume: h.volume("backup")})
		b, err := h.u.Command(env, pgtest.HostCommand(t, pod.Container, h.scripts)).CombinedOutput()
		var r engine.Report
		if err == nil {
			m, rerr := os.ReadFile(env["TERMINATION_MESSAGE_PATH"])
			if rerr == nil {
				r, err = engine.ParseReport(string(m))
			} else {
				err = rerr
			}
		}
		done <- result{r, string(b), err}
	}()
	require.Eventually(t, func() bool {
		return h.sql(source.Port, h.cluster.Database,
			"SELECT count(*) > 0 FROM pg_locks WHERE NOT granted AND relation = 'billing.invoices'::regclass") == "t"
	}, 60*time.Second, 100*time.Millisecond, "the backup's counts and dump wait for the lock")
	out, err = h.appSQL(source.Port, "INSERT INTO orders (customer, item) SELECT 1, 'during ' || g FROM generate_series(1, 10) g")
	require.NoError(t, err, out)
	release()
	r := <-done
	require.NoError(t, r.err, r.out)

	counts, err := os.ReadFile(filepath.Join(h.volume("backup"), "during.dump"+engine.CountsSuffix))
	require.NoError(t, err)
	assert.Contains(t, string(counts), "public.orders\t490\n", "the rows added after the backup started are not counted")
	verified, out, err := h.verify("backup", r.report.File, r.report.SHA256, "SELECT count(*) = 490 FROM orders")
	require.NoError(t, err, out)
	assert.Nil(t, verified.Verification.Failed(), "%v\n%s", checkNames(verified.Verification), out)
}

// on is h for a subtest: its failures are t's.
func (h *host) on(t testing.TB) *host {
	c := *h
	c.t = t
	return &c
}
