// Command image builds the operator image without a container engine or a
// base image to fetch: from an empty image, the static operator binary as
// entrypoint, the JMX exporter's attach helpers for amd64 and arm64, the
// PostgreSQL instance agent (deckhand-instance), user 65532:65532, no
// shell; one image per platform in a multi-platform index,
// written as an OCI layout (push it with any OCI tool, e.g.
// `crane push build/image ghcr.io/...` or `skopeo copy --all oci:build/image:VERSION docker://...`).
//
// The upstream Prometheus JMX exporter agent jar is not in this image: it
// is fetched from Maven Central, which this build does not reach. The
// Dockerfile adds it where it can be fetched; without it the JMX exporter
// controller cannot attach agents.
//
// Run by `make image`.
package main

import (
	"cmp"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

func main() {
	out := flag.String("out", "build/image", "OCI layout directory (replaced)")
	platforms := flag.String("platforms", "linux/amd64,linux/arm64", "comma-separated platforms")
	version := flag.String("version", "dev", "version stamped into the binary and the image")
	tag := flag.String("tag", "", "the image's name in the layout (default: the version)")
	agentJar := flag.String("agent-jar", "", "put this JMX agent jar at "+AgentJarPath+" (tests only: the real node's image carries the stand-in agent)")
	binDir := flag.String("bin-dir", "", "build the binaries here and keep them, so a rebuild of unchanged sources links nothing (default: a temporary directory)")
	flag.Parse()

	root, err := os.Getwd()
	if err != nil {
		log.Fatal(err)
	}
	created := time.Unix(0, 0).UTC()
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		sec, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			log.Fatalf("SOURCE_DATE_EPOCH=%q: %v", s, err)
		}
		created = time.Unix(sec, 0).UTC()
	}
	idx, err := Build(Options{
		Root: root, Out: *out, Platforms: strings.Split(*platforms, ","), Version: *version, Created: created,
		AgentJar: *agentJar, Tag: *tag, BinDir: *binDir,
	})
	if err != nil {
		log.Fatal(err)
	}
	digest, err := idx.Digest()
	if err != nil {
		log.Fatal(err)
	}
	abs, _ := filepath.Abs(*out)
	fmt.Printf("image deckhand:%s (%s) %s as an OCI layout in %s\n", cmp.Or(*tag, *version), *platforms, digest, abs)
	if *agentJar != "" {
		fmt.Printf("note: %s holds %s, not the upstream JMX exporter agent\n", AgentJarPath, *agentJar)
		return
	}
	fmt.Println("note: the upstream JMX exporter agent jar is not included (Maven Central cannot be reached from this build); the Dockerfile adds it where it can be fetched")
}
