# PIN event consumers. `make run` and `make test` are all a newcomer needs;
# see README.md.

GO        ?= go
# encoding/json on Go's new implementation (encoding/json/v2, a Go
# experiment in 1.25 and 1.26): the same API and behaviour, some error
# texts reworded, and about half the CPU of a decode (crm's consumer: 10 %
# less CPU per event; bench/README.md). Every build, test and image of
# this Makefile uses it; GOEXPERIMENT= on the command line builds without.
export GOEXPERIMENT ?= jsonv2
BIN       := bin
SERVICES  := messenger-consumers rewards-consumers crm-consumers
GOLANGCI  := $(GO) tool -modfile=tools/go.mod golangci-lint
# Tests mostly wait on the broker and the database: run more of them than
# there are cores.
TESTFLAGS ?= -count=1 -parallel 8 -timeout 20m

.PHONY: all build run test tidy-check fuzz generate generate-check migrate-diff migrate-lint migrate-plan lint bench chaos image image-binaries image-test clean clean-data

all: build

build:
	$(GO) build -o $(BIN)/ ./cmd/...

## run: the whole system on an embedded default (local PostgreSQL under .data/,
## in-process Kafka-protocol broker), a demo scenario, and what happened.
run: build
	$(BIN)/pinctl dev $(ARGS)

## test: every test; the runtime and the services under the race detector
## (RACE_PKGS). One PostgreSQL serves the whole run: the one at DATABASE_URL
## when set, else a throwaway server pinctl starts and stops. Tests that run
## the consumer binaries take them from the bin/ just built.
RACE_PKGS := ./consumers/consumer/... ./consumers/messenger/... ./consumers/rewards/... ./consumers/crm/...
TEST_CMD   = PIN_CONSUMERS_BIN=$(CURDIR)/$(BIN) $(GO) test $(TESTFLAGS) -race $(RACE_PKGS) && \
	PIN_CONSUMERS_BIN=$(CURDIR)/$(BIN) $(GO) test $(TESTFLAGS) $$($(GO) list ./... | grep -v $(patsubst ./%/...,-e /%,$(RACE_PKGS)))
test: build
ifdef DATABASE_URL
	$(TEST_CMD)
else
	$(BIN)/pinctl pg exec -- sh -c '$(TEST_CMD)'
endif

## tidy-check: go.mod and go.sum are what `go mod tidy` would leave.
tidy-check:
	@$(GO) mod tidy -diff || { echo "tidy-check: run 'go mod tidy' and commit"; exit 1; }

## fuzz: each fuzz target in turn for FUZZTIME (make fuzz FUZZTIME=10m).
## Their seed corpora are under each package's testdata/fuzz, which plain
## `go test` runs; what the fuzzer learns stays in Go's cache
## ($(go env GOCACHE)/fuzz). Every target runs; a failing input is written
## to testdata/fuzz: commit it with the fix. FUZZFLAGS: -parallel 2 (workers).
FUZZTIME  ?= 30s
FUZZFLAGS ?= -parallel 2
FUZZ_TARGETS := \
	consumers/consumer:FuzzDecodeEnvelope \
	consumers/consumer:FuzzDecodePayload \
	consumers/messenger:FuzzDecodeMessenger \
	consumers/messenger:FuzzReconcile \
	consumers/rewards:FuzzDecodeRewards \
	consumers/rewards:FuzzDecide \
	consumers/crm:FuzzDecodeCRM

fuzz: build
ifdef DATABASE_URL
	@failed=""; for t in $(FUZZ_TARGETS); do \
		pkg=./$${t%%:*}; name=$${t##*:}; \
		echo "== $$name ($$pkg), $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) $(FUZZFLAGS) $$pkg || failed="$$failed $$name"; \
	done; \
	if [ -n "$$failed" ]; then echo "fuzz: failed:$$failed (inputs under testdata/fuzz)"; exit 1; fi
else
	$(BIN)/pinctl pg exec -- $(MAKE) --no-print-directory fuzz FUZZTIME=$(FUZZTIME) FUZZFLAGS='$(FUZZFLAGS)'
endif

## generate: the ent client from schema/.
generate:
	$(GO) generate ./...

## generate-check: regenerating ent and re-diffing the migrations must not
## change the tree (CI).
generate-check: build
	$(GO) generate ./...
	$(BIN)/pinctl migrate diff generate_check
	@if [ -n "$$(git status --porcelain -- ent schema migrate)" ]; then \
		echo "generate-check: the generated code or the migrations are out of date:"; \
		git status --porcelain -- ent schema migrate; \
		echo "run 'make generate' and 'make migrate-diff NAME=…', review, commit"; \
		exit 1; \
	fi
	@echo "generate-check: ent/ and migrate/migrations are up to date"

## migrate-diff NAME=add_x: a new migration file from the ent schema.
migrate-diff: build
	@test -n "$(NAME)" || { echo "usage: make migrate-diff NAME=short_description"; exit 2; }
	$(BIN)/pinctl migrate diff $(NAME)

## migrate-lint: lint the newest migration file(s) (LATEST=N).
migrate-lint: build
	$(BIN)/pinctl migrate lint --latest $(or $(LATEST),1)

## migrate-plan URL=postgres://…: what `pinctl migrate apply` would run there.
migrate-plan: build
	$(BIN)/pinctl migrate plan --url "$(URL)"

## lint: gofmt, vet and golangci-lint; with the tag image, so the image
## test (deploy/image) is checked too.
lint:
	@out=$$(git ls-files '*.go' | grep -v '^ent/' | xargs gofmt -l); \
		if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet -tags image ./...
	$(GOLANGCI) run --build-tags image ./...

## bench: each consumer's throughput, latency and CPU per event against its
## broker-only limit (N=100000; ARGS="--events 10000 --only rewards"); see
## bench/README.md.
bench: build
	$(BIN)/pinctl bench $(ARGS)

## chaos: the consumers under faults, checked against a model of the events
## (ARGS="--seed 7", ARGS="--short", ARGS="--events 100000"); see docs/operations.md.
chaos: build
	$(BIN)/pinctl chaos $(ARGS)

## image: one image of the four binaries (Containerfile), FROM scratch. The
## binaries are built here as `make build` builds them (glibc, with the
## librdkafka confluent-kafka-go bundles for it: the build `make bench`
## measures), stripped, into $(IMAGE_CTX) with the CA bundle, and the
## shared objects they load (ldd: glibc's loader, libc, libm) under
## $(IMAGE_CTX)/root at their paths, with an /etc/nsswitch.conf: the
## build context. A static musl build cost 22–47 % more of the consumer's
## CPU an event: musl's malloc maps and unmaps the C side's (librdkafka's)
## memory at a high rate (bench/README.md, session 24). CONTAINER is
## podman, else docker. IMAGE is what deploy/kubernetes names: the test of
## the manifests reads it from here. PODMAN_FLAGS are the container
## engine's global flags a host may need (.ci/run sets this machine's),
## never the Containerfile's business.
IMAGE        ?= pin-consumers
VERSION      ?= $(shell git -c safe.directory='*' describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION     ?= $(shell git -c safe.directory='*' rev-parse HEAD 2>/dev/null || echo unknown)
VERSION      := $(VERSION)
REVISION     := $(REVISION)
SOURCE       ?= https://github.com/pin-platform/pin
CONTAINER    ?= $(shell command -v podman >/dev/null 2>&1 && echo podman || echo docker)
PODMAN_FLAGS ?=
IMAGE_CTX    := $(BIN)/image
CA_BUNDLE    ?= /etc/ssl/certs/ca-certificates.crt
IMAGE_FLAGS  := -trimpath -ldflags '-s -w'

# The shared objects the image's binaries load, as ldd resolves them here:
# "name => /path (addr)", and the loader's "/path (addr)". A library ldd
# cannot find ("=> not found") fails the build. Name lookups: glibc has
# "files" and "dns" built in since 2.34 (no NSS modules to copy), and the
# image's /etc/nsswitch.conf puts /etc/hosts first, as distributions do.
IMAGE_LIBS = ldd $(IMAGE_CTX)/pinctl $(addprefix $(IMAGE_CTX)/,$(SERVICES)) | awk \
	'/not found/ { print "image: " $$0 > "/dev/stderr"; bad = 1 } \
	 $$2 == "=>" && $$3 ~ /^\// && !seen[$$3]++ { print $$3 } \
	 $$1 ~ /^\// && $$1 !~ /:$$/ && !seen[$$1]++ { print $$1 } \
	 END { exit bad }'

image-binaries:
	@test -n "$(BIN)" || { echo "image: BIN is empty"; exit 1; }
	rm -rf $(IMAGE_CTX)
	mkdir -p $(IMAGE_CTX)/root/etc
	$(GO) build $(IMAGE_FLAGS) -o $(IMAGE_CTX)/ ./cmd/...
	cp $(CA_BUNDLE) $(IMAGE_CTX)/ca-certificates.crt
	@libs=$$($(IMAGE_LIBS)) || { echo "image: ldd could not resolve every shared object"; exit 1; }; \
	[ -n "$$libs" ] || { echo "image: ldd listed no shared objects (a static build?)"; exit 1; }; \
	for f in $$libs; do \
		mkdir -p $(IMAGE_CTX)/root$$(dirname $$f) && cp -L $$f $(IMAGE_CTX)/root$$f && echo "image: $$f" || exit 1; \
	done
	printf 'hosts: files dns\n' >$(IMAGE_CTX)/root/etc/nsswitch.conf

image: image-binaries
	$(CONTAINER) $(PODMAN_FLAGS) build -f Containerfile \
		--build-arg VERSION=$(VERSION) --build-arg REVISION=$(REVISION) --build-arg SOURCE=$(SOURCE) \
		-t $(IMAGE):$(VERSION) -t $(IMAGE):latest $(IMAGE_CTX)
	@$(CONTAINER) $(PODMAN_FLAGS) image inspect --format '{{.Size}}' $(IMAGE):$(VERSION) | \
		awk '{ printf "image: $(IMAGE):$(VERSION), %.1f MB\n", $$1 / 1e6 }'

## image-test: the image end to end (deploy/image): its consumer, run by
## the container engine on the host network against the test PostgreSQL and
## an in-process broker, applies an event, dead-letters a poison message,
## answers /readyz and exits 0 on stop; its pinctl migrates a fresh
## database; read-only root, non-root user.
IMAGE_TEST_CMD = PIN_IMAGE=$(IMAGE):$(VERSION) PIN_CONTAINER="$(CONTAINER) $(PODMAN_FLAGS)" \
	$(GO) test -count=1 -tags image -timeout 10m -v ./deploy/image/
image-test: image build
ifdef DATABASE_URL
	$(IMAGE_TEST_CMD)
else
	$(BIN)/pinctl pg exec -- sh -c '$(IMAGE_TEST_CMD)'
endif

clean:
	rm -rf $(BIN)

## clean-data: remove the embedded PostgreSQL of `make run`.
clean-data:
	@if [ -f .data/postgres/postmaster.pid ]; then $(BIN)/pinctl dev --stop-db || true; fi
	rm -rf .data
