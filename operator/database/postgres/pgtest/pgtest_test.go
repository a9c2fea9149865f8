package pgtest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A socket lock a killed server left behind, naming a PID that no longer
// runs or now runs something else, is removed with its socket before a
// server starts on that port; another port's lock stays.
func TestAStaleSocketLockIsRemovedBeforeAServerStarts(t *testing.T) {
	for name, pid := range map[string]int{"a PID that runs something else": os.Getpid(), "a PID that does not run": 1 << 30} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			lock := filepath.Join(dir, ".s.PGSQL.5999.lock")
			other := filepath.Join(dir, ".s.PGSQL.6000.lock")
			body := fmt.Sprintf("%d\n/var/lib/postgresql/data\n1700000000\n5999\n/var/run/postgresql\n", pid)
			for _, f := range []string{lock, filepath.Join(dir, ".s.PGSQL.5999"), other} {
				require.NoError(t, os.WriteFile(f, []byte(body), 0o600))
			}
			removeStaleSocketLock(t, dir, "5999")
			assert.NoFileExists(t, lock)
			assert.NoFileExists(t, filepath.Join(dir, ".s.PGSQL.5999"))
			assert.FileExists(t, other)
		})
	}
}
