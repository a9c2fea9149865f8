# syntax=docker/dockerfile:1
# The deckhand operator: a static binary on an empty image (scratch),
# running as 65532:65532, with no shell. `make image` builds the same image
# without Docker (hack/image, which checks this file's final stage against
# it); this file also adds the upstream JMX exporter agent jar.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY cmd/ cmd/
COPY operator/ operator/
ARG VERSION=dev
RUN CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/deckhand ./cmd/deckhand
# The PostgreSQL instance agent: a database pod's init container copies it
# from this image into an emptyDir (docs/design/database-failover.md, "The instance channel").
RUN CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags "-s -w" -o /out/lib/deckhand-instance ./cmd/deckhand-instance
# The JMX exporter's attach helper, copied by the operator into Java
# containers of either architecture: static, no cgo.
RUN for arch in amd64 arm64; do \
      CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -trimpath -ldflags "-s -w" \
        -o /out/lib/deckhand-jmx-attach-linux-$arch ./cmd/deckhand-jmx-attach; \
    done

# The upstream Prometheus JMX exporter agent, pinned. 1.0.1 is the last
# javaagent release on Maven Central (from 1.1.0 on the jar is published on
# GitHub Releases only). The jar is checked twice, and the build fails on
# a mismatch: against the SHA-1 Maven Central publishes beside it, and
# against the SHA-256 pinned here (the value two independent package
# recipes pin for this jar). Override both build args together. The jar
# cannot be downloaded on the machines deckhand is developed on, so this
# stage was not run there, and no substitute jar is shipped instead.
FROM golang:1.26 AS agent
ARG JMX_EXPORTER_VERSION=1.0.1
ARG JMX_EXPORTER_SHA256=7d61f737fd661610ccc14aea79764faa1ea94a340cbc8f0029b3d2edea3d80c1
RUN set -eu; \
    base=https://repo1.maven.org/maven2/io/prometheus/jmx/jmx_prometheus_javaagent/${JMX_EXPORTER_VERSION}; \
    jar=jmx_prometheus_javaagent-${JMX_EXPORTER_VERSION}.jar; \
    curl -fsSLo /tmp/$jar $base/$jar; \
    published=$(curl -fsSL $base/$jar.sha1 | cut -c1-40); \
    echo "$published  /tmp/$jar" | sha1sum -c -; \
    echo "$JMX_EXPORTER_SHA256  /tmp/$jar" | sha256sum -c -; \
    mkdir -p /out/lib && mv /tmp/$jar /out/lib/jmx_prometheus_javaagent.jar

FROM scratch
ARG VERSION=dev
LABEL org.opencontainers.image.title=deckhand \
      org.opencontainers.image.version=${VERSION} \
      org.opencontainers.image.source=https://github.com/deckhand-dev/deckhand
COPY --from=build /out/deckhand /deckhand
COPY --from=build /out/lib/ /usr/local/lib/deckhand/
COPY --from=agent /out/lib/ /usr/local/lib/deckhand/
USER 65532:65532
ENTRYPOINT ["/deckhand"]
