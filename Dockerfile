# syntax=docker/dockerfile:1
# The deckhand operator: a static binary on distroless, running as nonroot,
# with no shell in the image.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY cmd/ cmd/
COPY operator/ operator/
ARG VERSION=dev
RUN CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags "-s -w" -o /out/deckhand ./cmd/deckhand

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/deckhand /deckhand
USER 65532:65532
ENTRYPOINT ["/deckhand"]
