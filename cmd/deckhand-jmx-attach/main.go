// Command deckhand-jmx-attach runs inside a Java container on behalf of
// the PrometheusJmxExporter controller: it finds the JVM from /proc, checks
// that the agent can start there and loads it through the HotSpot attach
// protocol, with no JDK, jattach or shell needed in the image. Each command
// prints one JSON line (jvm.Result) that the controller parses.
//
//	deckhand-jmx-attach checksum FILE...
//	deckhand-jmx-attach discover [-match S]
//	deckhand-jmx-attach attach -agent JAR -config FILE -port N [-path /metrics] [-match S] [-state-dir DIR] [-wait 15s]
//	deckhand-jmx-attach verify -port N [-path /metrics] [-wait 15s]
//
// Build it static: CGO_ENABLED=0 go build ./cmd/deckhand-jmx-attach.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/deckhand-dev/deckhand/operator/jmxexporter/jvm"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	match := fs.String("match", "", "substring of the JVM's command line")
	agent := fs.String("agent", "", "agent jar")
	config := fs.String("config", "", "exporter configuration")
	port := fs.Int("port", 0, "port the agent serves on")
	path := fs.String("path", "/metrics", "metrics path")
	stateDir := fs.String("state-dir", "", "directory of the per-JVM markers (default: the agent's)")
	wait := fs.Duration("wait", jvm.VerifyWait, "how long verify (and attach, after loading) waits for metrics")
	_ = fs.Parse(os.Args[2:])
	jvm.VerifyWait = *wait

	var r jvm.Result
	switch os.Args[1] {
	case "checksum":
		r = jvm.Checksums(fs.Args())
	case "discover":
		jvms, err := jvm.Discover(*match)
		if err != nil {
			r = jvm.Result{Result: jvm.Failed, Reason: jvm.ReasonAttachError, Message: err.Error()}
		} else {
			r = jvm.Result{Result: "Discovered", JVMs: jvms}
		}
	case "attach":
		if *agent == "" || *config == "" || *port == 0 {
			usage()
		}
		if *stateDir == "" {
			*stateDir = filepath.Dir(*agent)
		}
		r = jvm.Attach(jvm.AttachOptions{Match: *match, Agent: *agent, Config: *config, Port: *port, Path: *path, StateDir: *stateDir})
	case "verify":
		if *port == 0 {
			usage()
		}
		r = jvm.Verify(*port, *path, *wait)
	default:
		usage()
	}
	if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: deckhand-jmx-attach checksum FILE... | discover [-match S] | attach -agent JAR -config FILE -port N [-path P] [-match S] [-state-dir D] [-wait D] | verify -port N [-path P] [-wait D]")
	os.Exit(2)
}
