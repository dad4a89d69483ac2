# idemguard — run `make` or `make help` for the targets.
#
# Tests that need MySQL read IDEMGUARD_TEST_MYSQL_DSN, else use Docker, else root@127.0.0.1:3306
# (see internal/testdb); with none of them they skip (make test says how many), or fail when
# CI=true. .ci/run sets everything up.

GO        ?= go
BIN       ?= bin/idemguard
FUZZTIME  ?= 30s
# Fuzz workers per target (go test -parallel); empty means GOMAXPROCS. FUZZ selects targets by
# name (an extended regexp). See docs/TESTING.md.
FUZZPARALLEL ?=
FUZZ         ?= .

.DEFAULT_GOAL := help
.PHONY: help test bench pgo lint build run migrate fuzz fuzz-long web sim image manifests release-snapshot

help: ## Show this help
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_.-]+:.*## / {printf "  %-17s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# Tests skipped for want of MySQL note themselves in IDEMGUARD_TEST_SKIP_LOG (internal/testdb),
# and so do deploy/'s tests skipped for want of a tool ("TestName (helm)"); go test hides a
# passing package's skips, so the counts close the run.
test: ## Run all tests with the race detector (MySQL from IDEMGUARD_TEST_MYSQL_DSN, Docker or 127.0.0.1:3306)
	@skips="$$(mktemp)"; \
	IDEMGUARD_TEST_SKIP_LOG="$$skips" $(GO) test -race -count=1 ./...; status=$$?; \
	tools=$$(sed -n 's/.* (\([a-z]*\))$$/\1/p' "$$skips" | sort -u | tr '\n' ' '); \
	nt=$$(grep -c ' ([a-z]*)$$' "$$skips"); n=$$(grep -vc ' ([a-z]*)$$' "$$skips"); rm -f "$$skips"; \
	if [ "$$nt" -gt 0 ]; then echo "make test: $$nt tests skipped for want of a tool: $$tools(.ci/run installs them)"; fi; \
	if [ "$$n" -gt 0 ]; then echo "make test: $$n tests skipped for want of MySQL; set IDEMGUARD_TEST_MYSQL_DSN='user:password@tcp(host:3306)/test' (a user that may CREATE and DROP DATABASE), start Docker, or run MySQL/MariaDB on 127.0.0.1:3306 for root without a password"; fi; \
	exit $$status

# make bench measures against this server (a user that may CREATE and DROP DATABASE); it creates
# and drops its own idemguard_bench_<hex> database. BENCH_FLAGS go to the bench program, e.g.
# BENCH_FLAGS=-quick or BENCH_FLAGS='-suite fresh -cpuprofile cpu.out' (go run ./internal/bench -h).
IDEMGUARD_BENCH_MYSQL_DSN ?= $(or $(IDEMGUARD_TEST_MYSQL_DSN),root@tcp(127.0.0.1:3306)/test)
BENCH_FLAGS ?=

bench: ## Go micro-benchmarks, then guard vs raw SQL on MariaDB (docs/BENCHMARKS.md)
	@IDEMGUARD_BENCH_MYSQL_DSN='$(IDEMGUARD_BENCH_MYSQL_DSN)' $(GO) run ./internal/bench -ping
	$(GO) test -run '^$$' -bench . -benchmem ./...
	IDEMGUARD_BENCH_MYSQL_DSN='$(IDEMGUARD_BENCH_MYSQL_DSN)' $(GO) run ./internal/bench $(BENCH_FLAGS)

# make pgo records serve's CPU profile under the bench's HTTP and stream load and writes it to
# cmd/idemguard/default.pgo, which every go build of ./cmd/idemguard then compiles with
# (profile-guided optimization; docs/BENCHMARKS.md). Run it when the hot paths changed.
pgo: ## Record serve's profile under the bench's load into cmd/idemguard/default.pgo (profile-guided build)
	IDEMGUARD_BENCH_MYSQL_DSN='$(IDEMGUARD_BENCH_MYSQL_DSN)' $(GO) run ./internal/bench -suite http,stream \
		-http-cases fresh,replay -pgo cmd/idemguard/default.pgo $(BENCH_FLAGS)

lint: ## gofmt (must be clean), go vet, and staticcheck if installed
	@out="$$(gofmt -l $$(git ls-files --cached --others --exclude-standard '*.go'))"; \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	@if command -v staticcheck >/dev/null 2>&1; then echo staticcheck ./...; staticcheck ./...; \
	else echo "staticcheck not installed; skipped (go install honnef.co/go/tools/cmd/staticcheck@latest)"; fi

# make build stamps the release version (the git tag, if HEAD has one), the commit and its date
# into the binary (idemguard version), as goreleaser does for a release; a go build without them
# says devel and what ReadBuildInfo knows.
VERSION ?= $(shell git describe --tags --dirty 2>/dev/null)
COMMIT  ?= $(shell git rev-parse HEAD 2>/dev/null)
DATE    ?= $(shell git log -1 --format=%cI 2>/dev/null)
LDFLAGS ?= -X main.version=$(VERSION) -X main.commit=$(COMMIT) -X main.date=$(DATE)

build: ## Build the binary into bin/idemguard (VERSION=v1.2.3 to stamp a release)
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/idemguard

# make image builds the static binary (CGO_ENABLED=0, the flags goreleaser uses) into bin/image/
# and the image FROM scratch around it (deploy/Dockerfile): nothing is pulled, so it builds
# offline. CONTAINER_TOOL is podman if installed, else docker. Run it (podman or docker):
#   podman run --rm -p 127.0.0.1:8080:8080 -e IDEMGUARD_MODE=development localhost/idemguard:dev serve
IMAGE          ?= localhost/idemguard:dev
CONTAINER_TOOL ?= $(shell command -v podman >/dev/null 2>&1 && echo podman || echo docker)

image: ## Build the container image (IMAGE=localhost/idemguard:dev) FROM scratch (podman or docker; deploy/Dockerfile)
	@mkdir -p bin/image
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS) -s -w' -o bin/image/idemguard ./cmd/idemguard
	$(CONTAINER_TOOL) build $(if $(filter podman,$(notdir $(CONTAINER_TOOL))),--format docker) -f deploy/Dockerfile \
		--build-arg VERSION='$(or $(VERSION),devel)' --build-arg REVISION='$(COMMIT)' --build-arg CREATED='$(DATE)' \
		-t '$(IMAGE)' bin/image
	@$(CONTAINER_TOOL) image inspect --format '$(IMAGE): {{.Size}} bytes' '$(IMAGE)'

manifests: ## Copy docs/alerts.yaml into the Helm chart and render deploy/manifests/ from it (needs helm)
	cp docs/alerts.yaml deploy/helm/idemguard/files/alerts.yaml
	deploy/render-manifests

# make release-snapshot runs the whole release (.goreleaser.yaml) without publishing anything:
# linux/darwin x amd64/arm64 archives, checksums.txt and the linux images, in dist/. The newest
# entry of CHANGELOG.md is the release notes. Needs goreleaser v2 and podman or docker.
GORELEASER ?= goreleaser

release-snapshot: ## Build the release locally into dist/: archives, checksums, images (goreleaser, publishes nothing)
	@mkdir -p bin
	awk '/^## /{n++; next} n==1' CHANGELOG.md > bin/release-notes.md
	@# goreleaser reads the commit only in a clone with a remote: a clone without one gets the
	@# project's address for this run (in the environment; the repository's config is untouched).
	if ! git ls-remote --get-url >/dev/null 2>&1; then \
		export GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=remote.origin.url GIT_CONFIG_VALUE_0=https://github.com/idemguard/idemguard.git; fi; \
	$(if $(filter podman,$(notdir $(CONTAINER_TOOL))),PATH="$(CURDIR)/deploy/podman-as-docker:$$PATH") \
		$(GORELEASER) release --snapshot --clean --release-notes bin/release-notes.md

# make run listens on $IDEMGUARD_LISTEN (127.0.0.1:0 picks a free port; serve prints the one bound).
IDEMGUARD_LISTEN := $(or $(IDEMGUARD_LISTEN),127.0.0.1:8080)

run: build ## Build and start the server in development mode (in-memory store, demo scope, $IDEMGUARD_LISTEN or 127.0.0.1:8080)
	env -u IDEMGUARD_MYSQL_DSN -u IDEMGUARD_CONFIG IDEMGUARD_MODE=development IDEMGUARD_LISTEN='$(IDEMGUARD_LISTEN)' $(abspath $(BIN)) serve

migrate: build ## Build, then apply migrations to the database in IDEMGUARD_MYSQL_DSN
	./$(BIN) migrate up

fuzz: ## Run every Fuzz target of the module (found, not listed) for FUZZTIME each (default 30s)
	GO='$(GO)' FUZZTIME='$(FUZZTIME)' FUZZPARALLEL='$(FUZZPARALLEL)' FUZZ='$(FUZZ)' .ci/fuzz

fuzz-long: ## The pre-release run: every Fuzz target for 10 minutes each (docs/TESTING.md)
	GO='$(GO)' FUZZTIME=10m FUZZPARALLEL='$(FUZZPARALLEL)' FUZZ='$(FUZZ)' .ci/fuzz

# make sim explores the deterministic simulation (internal/sim) beyond the fixed seeds make test
# runs (1 to 3000): SEEDS seeds from START, WORKERS at once, at most SIMTIME (SEEDS=0: until
# SIMTIME). SEED=n replays one seed REPEAT times; DEFECT=name puts back a historical defect.
# Without -race, for throughput; RACE=-race adds it. See docs/TESTING.md.
SEEDS   ?= 100000
START   ?= 1000000
SIMTIME ?= 24h
WORKERS ?= 1
SEED    ?=
REPEAT  ?= 20
DEFECT  ?=
RACE    ?=

sim: ## Explore simulation seeds: SEEDS=N START=n, or SEEDS=0 SIMTIME=30m; SEED=n replays one (docs/TESTING.md)
	$(GO) test $(RACE) -count=1 -timeout 0 -v -run '^TestSimulation$$' ./internal/sim -sim.start=$(START) \
		-sim.seeds=$(SEEDS) -sim.budget=$(SIMTIME) -sim.workers=$(WORKERS) \
		$(if $(SEED),-sim.seed=$(SEED) -sim.repeat=$(REPEAT)) $(if $(DEFECT),-sim.defect=$(DEFECT))

web: ## Regenerate web/'s OpenAPI types and the embedded demo bundle (needs npm ci in web/)
	cd web && npm run gen:types && npm run build:demo && npm test
