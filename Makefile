# deckhand — two commands set everything up on a fresh machine:
#   make run    tools, a cluster (KUBECONFIG's, else the real node as root,
#               else the local one), the chart, the operator, the seeds' demos
#   make test   every test, including generated-file verification
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

TOOLS   := hack/tools.sh
CLUSTER := hack/cluster.sh
tool     = $(shell $(TOOLS) dir $(1))/$(2)
CONTROLLER_GEN = $(call tool,controller-gen,controller-gen)
HELM_DOCS      = $(call tool,helm-docs,helm-docs)
CRD_REF_DOCS   = $(call tool,crd-ref-docs,crd-ref-docs)
KUBECTL        = $(call tool,kube,kubectl)
IMAGE ?= deckhand:dev
# The operator's version: the chart's appVersion, stamped into the binary and the image.
VERSION ?= $(shell awk '/^appVersion:/ {gsub(/"/, "", $$2); print $$2}' charts/deckhand/Chart.yaml)
IMAGE_DIR ?= build/image
PLATFORMS ?= linux/amd64,linux/arm64
GO_TEST_FLAGS ?=

.PHONY: help
help: ## list targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

##@ set-up
.PHONY: tools
tools: ## build the pinned toolchain from source into ~/.cache/deckhand (first time ~20 min)
	@$(TOOLS) build

.PHONY: cluster
cluster: ## start (or restart) the local cluster; last line is its export KUBECONFIG=...
	@$(CLUSTER) up

.PHONY: cluster-down
cluster-down: ## delete the local cluster, and the real-node cluster if one is up
	@$(CLUSTER) down
	@hack/node.sh down

.PHONY: node-cluster
node-cluster: ## start (or restart) the real-node cluster (needs root; docs/development/realnode.md); last line is its export KUBECONFIG=...
	@hack/node.sh up

.PHONY: node-ct
node-ct: ## ct install of every chart ci/*-values.yaml on the running real-node cluster (root; part of make test's node group)
	@hack/node/ct-install.sh

.PHONY: env
env: ## print exports for the pinned tools and the local cluster: eval "$$(make -s env)"
	@$(CLUSTER) env

##@ development
.PHONY: generate
generate: ## regenerate deepcopy code, CRDs, the chart's generated templates, schema and README, docs/api-reference.md
	@$(TOOLS) build controller-gen helm-docs crd-ref-docs
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./operator/apis/...
	rm -f crds/*.yaml
	$(CONTROLLER_GEN) crd paths=./operator/apis/... output:crd:dir=crds
	go run ./hack/genchart --controller-gen $(CONTROLLER_GEN)
	$(HELM_DOCS) --log-level warning --chart-search-root charts --sort-values-order file
	go run ./hack/apidocs --crd-ref-docs $(CRD_REF_DOCS)

.PHONY: verify
verify: generate ## fail when a generated file is stale
	@if [ -n "$$(git status --porcelain -- crds operator/apis charts docs/api-reference.md)" ]; then \
	  git status --porcelain -- crds operator/apis charts docs/api-reference.md; git --no-pager diff --stat -- crds operator/apis charts docs/api-reference.md; \
	  echo "generated files are stale: run 'make generate' and commit the result" >&2; exit 1; fi
	@echo "generated files are up to date"

.PHONY: build
build: ## build bin/deckhand
	go build -o bin/deckhand ./cmd/deckhand

.PHONY: lint
lint: ## go vet and gofmt
	go vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed" >&2; exit 1; }

.PHONY: chart-lint
chart-lint: ## helm lint --strict and ct lint (yamllint) of the chart, with every ci values file
	@$(TOOLS) build helm ct
	PATH="$$($(TOOLS) path):$$PATH" ct lint --all --config ct.yaml

.PHONY: test-deps
test-deps: ## install what the tests need (Debian packages, tools)
	@hack/test-deps.sh

.PHONY: fuzz
fuzz: ## every Go fuzz target for FUZZTIME each (default 5s)
	@hack/fuzz.sh

.PHONY: test-fast
test-fast: ## make test without the real-node group (DECKHAND_NODE=0: no root, no node cluster; e2e/node skips)
	@DECKHAND_NODE=0 $(MAKE) -s test

.PHONY: test
# Each package gets 25 minutes (-timeout 25m): the fault campaign (its own
# cluster, a 1,000-workload storm) takes 6-10 minutes on 2 busy cores, go
# test's default limit. hack/gotest.sh says which packages run with -race,
# and runs make fuzz alongside the fault campaign.
test: test-deps verify lint chart-lint ## every test: unit and integration (real API server), -race where deckhand's code runs in the test, the fuzz targets; ends with each package's time
	@$(CLUSTER) up >/dev/null
	@DECKHAND_TEST_KUBECONFIG=$$($(CLUSTER) kubeconfig) GO_TEST_FLAGS='$(GO_TEST_FLAGS)' FUZZ=1 hack/gotest.sh

# Benchmarks run one package at a time (-p 1): two benchmarks sharing the
# cores would measure each other. BENCH selects some (a go test -bench
# pattern); docs/performance.md gives the command for each figure.
BENCH ?= .
.PHONY: bench
bench: ## benchmarks, one package at a time (print numbers next to a floor; not pass/fail)
	@$(CLUSTER) up >/dev/null
	DECKHAND_TEST_KUBECONFIG=$$($(CLUSTER) kubeconfig) go test -p 1 -run '^$$' -bench '$(BENCH)' -benchtime 1x -timeout 60m ./...

##@ run
.PHONY: run
run: build ## tools, a cluster (yours, else the real node as root, else kwok; RUN_MODE=node|host), the chart, the operator, the seeds' demos
	@hack/run.sh

.PHONY: e2e-kind
e2e-kind: ## chart-testing with helm test (deckhand probe in the image), the demo and the e2e suite in a kind cluster (needs Docker; not part of make test)
	@hack/e2e-kind.sh

.PHONY: demo-image
demo-image: ## build seed 000's Flask demo image deckhand-demo-flask:0.1.0 (needs a Docker engine)
	docker build -t deckhand-demo-flask:0.1.0 demo/flask

.PHONY: image
image: ## build the operator image without Docker, for $(PLATFORMS), as an OCI layout in $(IMAGE_DIR)
	go run ./hack/image --out $(IMAGE_DIR) --platforms $(PLATFORMS) --version $(VERSION) --bin-dir build/image-bin

.PHONY: docker-build
docker-build: ## build the operator image with Docker (the same image, plus the upstream JMX agent jar)
	docker build --build-arg VERSION=$(VERSION) -t $(IMAGE) .
