// Command pause is the node's pod sandbox process (containerd's
// sandbox image): it holds the pod's namespaces open, reaps the zombies it
// inherits as PID 1, and exits on SIGINT or SIGTERM. Upstream's pause is C
// and its image sits in a registry this machine cannot reach, so the node
// builds this one from source instead.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range signals {
		if s == syscall.SIGCHLD {
			reapChildren()
			continue
		}
		os.Exit(0)
	}
}

// reapChildren waits for every exited child without blocking, so orphans
// re-parented to the sandbox do not stay zombies.
func reapChildren() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
