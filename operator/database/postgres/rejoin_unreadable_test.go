package postgres_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deckhand-dev/deckhand/internal/syncbuf"
	"github.com/deckhand-dev/deckhand/operator/database/postgres"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/pgtest"
)

// startOnce runs the server container's entrypoint of ordinal on
// dataVolume (following primaryPort) with env changed by change, until
// it exits or its server answers. It returns the output, the exit's
// error, and what the server answered to pg_is_in_recovery() ("" when it
// never answered; a server it started is stopped).
func (h *host) startOnce(t *testing.T, ordinal int, dataVolume, primaryPort string, change func(env map[string]string)) (string, error, string) {
	t.Helper()
	pod := postgres.Engine{}.ServerPod(h.cluster)
	env := h.serverEnv(pod, ordinal, dataVolume, primaryPort)
	change(env)
	cmd := h.u.Command(env, pgtest.HostCommand(t, pod.Container, h.scripts))
	log := &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = log, log
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-exited:
			return log.String(), err, ""
		case <-tick.C:
			if exec.Command(filepath.Join(h.bin, "pg_isready"), "-q", "-h", "127.0.0.1", "-p", env["PGPORT"]).Run() != nil {
				continue
			}
			recovery := inRecovery(h, env["PGPORT"])
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
			<-exited
			return log.String(), nil, recovery
		}
	}
}

// TestAnUnreadableDataDirectoryIsRefusedAndRejoinsOnceReadable: the old
// primary's disk fails (its data directory unreadable: chmod 000, as the
// real-node failover test does) and it crashes; the operator names the
// standby the primary. While the directory cannot be read the entrypoint
// refuses to start, and neither initialises nor clones anything beside it
// (it used to take the directory for an empty one and clone the primary
// next to it; a disk back while that clone ran got the clone moved
// *into* the old directory, which then started as a second primary,
// here shown by a disk that comes back as pg_basebackup starts). Once the
// disk is back the old primary rejoins as the new primary's standby
// through pg_rewind, without the rows it never had.
func TestAnUnreadableDataDirectoryIsRefusedAndRejoinsOnceReadable(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	old, standby := primaryAndStreamingStandby(t, h)
	h.namePrimary(1)
	standby.Stop(t)
	primary := h.server(h.scripts, 1, "data-1", "")
	out, err := h.appSQL(primary.Port, "INSERT INTO rows VALUES (2)")
	require.NoError(t, err, out)

	pgdata := filepath.Join(h.volume("data-0"), "pgdata")
	kill(t, old)
	require.NoError(t, os.Chmod(pgdata, 0))
	t.Cleanup(func() { _ = os.Chmod(pgdata, 0o700) })
	// The disk comes back the moment a clone begins.
	wrap := h.u.Dir(t, h.root, "disk-back-on-clone")
	require.NoError(t, os.WriteFile(filepath.Join(wrap, "pg_basebackup"),
		[]byte("#!/bin/sh\nchmod 700 \"$PGDATA\"\nexec "+filepath.Join(h.bin, "pg_basebackup")+" \"$@\"\n"), 0o755))
	log, err, recovery := h.startOnce(t, 0, "data-0", primary.Port, func(env map[string]string) {
		env["PATH"] = wrap + ":" + env["PATH"]
	})
	require.Empty(t, recovery, "the old primary's entrypoint started a server (pg_is_in_recovery: %s) from a directory it could not read:\n%s", recovery, log)
	require.Error(t, err, "the entrypoint does not start a server it cannot read:\n%s", log)
	assert.Contains(t, log, "cannot read the data directory "+pgdata)
	assert.NoDirExists(t, pgdata+".deckhand-new", "nothing initialised or cloned beside it")
	info, err := os.Stat(pgdata)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0), info.Mode().Perm(), "no clone ran (the disk stays as it was)")
	// Its agent says so: the operator keeps its fence until it can be read.
	ch := newChannel(t, h, h.cluster.Name+"-0")
	agent := ch.startGuardedAgent(t, h, 0, "data-0")
	st := statusOf(t, ch.client, agent)
	assert.Contains(t, st.DataDirectoryError, "cannot read the data directory")

	// The disk is back: it rejoins as a standby of the new primary.
	require.NoError(t, os.Chmod(pgdata, 0o700))
	st = statusOf(t, ch.client, agent)
	assert.Empty(t, st.DataDirectoryError)
	rejoined := h.server(h.scripts, 0, "data-0", primary.Port)
	assert.Contains(t, rejoined.Log.String(), "it starts as a standby of name-of-database-1")
	assert.Equal(t, "t", inRecovery(h, rejoined.Port))
	waitForRow(t, h, rejoined.Port, "2")
}
