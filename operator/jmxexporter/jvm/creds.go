package jvm

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// asJVMUser runs fn with the effective uid and gid of the JVM, as jattach
// does, when the helper runs as root and the JVM does not. HotSpot checks
// the attaching peer's uid and gid (JDK 8: both must equal the JVM's, and
// a trigger file owned by another uid is ignored; later JDKs also accept
// uid 0), and /proc/<pid>/environ, fd, cwd and root of another user's
// process are closed to a root without CAP_SYS_PTRACE (a container's root
// by default) but open to the process's own uid and gid.
//
// Only the effective ids change (real and saved stay root's), so the
// helper switches back afterwards to write its root-owned markers. Go
// applies set*id calls to every thread of the process (since Go 1.16),
// so no thread keeps the old ids.
func asJVMUser(j JVM, fn func() Result) Result {
	uid, gid := os.Geteuid(), os.Getegid()
	if uid != 0 || (j.UID == uid && j.GID == gid) {
		return fn()
	}
	if j.UID < 0 || j.GID < 0 {
		return failed(ReasonNotInspectable, fmt.Sprintf("cannot read the uid and gid of JVM %d from /proc/%d/status", j.PID, j.PID), true)
	}
	// Supplementary groups too (the JVM's own), so that what the helper
	// may read is what the JVM may read.
	groups, err := syscall.Getgroups()
	if err != nil {
		return failed(ReasonAttachError, fmt.Sprintf("reading the helper's groups: %v", err), true)
	}
	if err := syscall.Setgroups(supplementaryGroups(j.PID)); err != nil {
		return failed(ReasonDifferentUser, fmt.Sprintf("switching to JVM %d's groups: %v (the exec needs CAP_SETGID)", j.PID, err), false)
	}
	if err := syscall.Setresgid(-1, j.GID, -1); err != nil {
		_ = syscall.Setgroups(groups)
		return failed(ReasonDifferentUser, fmt.Sprintf("switching to JVM %d's group %d: %v (the exec needs CAP_SETGID)", j.PID, j.GID, err), false)
	}
	if err := syscall.Setresuid(-1, j.UID, -1); err != nil {
		_ = syscall.Setresgid(-1, gid, -1)
		_ = syscall.Setgroups(groups)
		return failed(ReasonDifferentUser, fmt.Sprintf("switching to JVM %d's user %d: %v (the exec needs CAP_SETUID)", j.PID, j.UID, err), false)
	}
	r := fn()
	// The uid first: back at uid 0, the helper may change its groups again.
	if err := syscall.Setresuid(-1, uid, -1); err != nil {
		return restoreFailure(r, err)
	}
	if err := syscall.Setresgid(-1, gid, -1); err != nil {
		return restoreFailure(r, err)
	}
	if err := syscall.Setgroups(groups); err != nil {
		return restoreFailure(r, err)
	}
	return r
}

// supplementaryGroups is the Groups: line of /proc/<pid>/status (readable
// by anyone); none when it cannot be read.
func supplementaryGroups(pid int) []int {
	f, err := os.Open(filepath.Join(Proc, strconv.Itoa(pid), "status"))
	if err != nil {
		return []int{}
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), "Groups:"); ok {
			groups := []int{}
			for _, g := range strings.Fields(rest) {
				if id, err := strconv.Atoi(g); err == nil {
					groups = append(groups, id)
				}
			}
			return groups
		}
	}
	return []int{}
}

// restoreFailure keeps an outcome that says something may be loaded: the
// controller must never take that for "nothing happened".
func restoreFailure(r Result, err error) Result {
	if MayHaveLoaded(r.Result, r.Reason) {
		r.Message = fmt.Sprintf("%s (switching back to root failed: %v)", r.Message, err)
		return r
	}
	return failed(ReasonAttachError, fmt.Sprintf("switching back to root after checking the JVM: %v", err), true)
}
