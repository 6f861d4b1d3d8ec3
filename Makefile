# opswire — one Makefile for every module of the workspace.
#
#   make build         all service binaries and the opswire command (also as kubectl-opswire) into ./bin
#   make test          unit, integration and end-to-end tests of every module
#                      (builds the Kubernetes components, etcd, CoreDNS and helm once, into ~/.cache/opswire/bin)
#   make lint          gofmt and go vet
#   make rules         promtool check/test of the alert rules (builds promtool once, into ~/.cache/opswire/bin)
#   make fuzz          every Go fuzz target for FUZZTIME each (part of make test)
#   make soak          the randomized fault soak (docs/soak.md) for SOAK_DURATION (10m), seed
#                      printed; make soak SOAK_SEED=<seed> replays one (not part of make test)
#   make bench         benchmarks; writes docs/benchmarks.md
#   make controlplane  only build the cached Kubernetes components, etcd, CoreDNS, nats-server and helm
#   make demo          opswire end to end on this machine, no cluster needed (Ctrl-C stops it)
#   make run           the five services against your current kubeconfig, local NATS, actors in dry-run
#                      (make run DRY_RUN=0 lets them act)
#   make images        OCI image archives per service for linux/amd64 and arm64 (no docker engine)
#   make push          push them: make push REGISTRY=ghcr.io/acme [TAG=v1.2.3]

SERVICES := watcher cordon cleanup report notifier
# The command for people (docs/operate.md): a module of its own, no image.
COMMANDS := opswire
MODULES  := shared $(addprefix services/,$(SERVICES) $(COMMANDS)) test
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -s -w -X github.com/opswire/opswire/shared/app.Version=$(VERSION)
GO       ?= go
# e2e tests start several API servers and processes: keep them sequential on small machines.
TEST_FLAGS ?= -count=1 -timeout 45m
# Unit tests run under the race detector (needs cgo: gcc).
UNIT_FLAGS ?= -race

.PHONY: all build test unit fuzz e2e lint bench controlplane clean tidy demo run images push rules soak

all: build

build:
	@mkdir -p bin
	@for s in $(SERVICES); do \
		echo ">> building opswire-$$s"; \
		CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/opswire-$$s ./services/$$s || exit 1; \
	done
	@echo ">> building opswire (and kubectl-opswire, the kubectl plugin)"
	@CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/opswire ./services/opswire
	@cp bin/opswire bin/kubectl-opswire

controlplane:
	@./hack/build-controlplane.sh

test: controlplane unit fuzz rules e2e

# The alert rules of deploy/prometheus: promtool check rules and their unit
# tests (promtool built from the Go module proxy, cached like kube-apiserver).
rules:
	@./hack/check-rules.sh

unit:
	@for m in $(MODULES); do \
		[ "$$m" = test ] && continue; \
		echo ">> unit tests: $$m"; \
		(cd $$m && $(GO) test $(TEST_FLAGS) $(UNIT_FLAGS) ./...) || exit 1; \
	done
	@echo ">> standalone builds (GOWORK=off)"
	@for s in $(SERVICES) $(COMMANDS); do \
		(cd services/$$s && GOWORK=off $(GO) build -o /dev/null ./...) || exit 1; \
	done

# Every fuzz target of every module, each for FUZZTIME (hack/fuzz.sh).
FUZZTIME ?= 5s
fuzz:
	@GO='$(GO)' MODULES='$(MODULES)' FUZZTIME='$(FUZZTIME)' ./hack/fuzz.sh

e2e:
	@echo ">> end-to-end tests (real kube-apiserver, etcd, nats-server, service processes)"
	@GO='$(GO)' TEST_FLAGS='$(TEST_FLAGS)' ./hack/e2e.sh

# The randomized fault soak (test/soak, docs/soak.md): the real services,
# controllers and control plane under a seeded workload and fault schedule,
# then the invariant checker over the audit log and OPS. The seed is printed
# first; SOAK_SEED replays it. Process logs of a failed run stay in .cache/soak-logs.
SOAK_DURATION ?= 10m
SOAK_SEED     ?=
soak: controlplane
	@rm -rf .cache/soak-logs
	@cd test && SOAK_DURATION='$(SOAK_DURATION)' SOAK_SEED='$(SOAK_SEED)' OPSWIRE_E2E_LOGS='$(CURDIR)/.cache/soak-logs' \
		$(GO) test -count=1 -timeout 4h -v -run '^TestSoak$$' ./soak/

lint:
	@out=$$(gofmt -l $(MODULES) hack); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@for m in $(MODULES); do (cd $$m && $(GO) vet ./...) || exit 1; done
	@echo "lint ok"

bench: controlplane
	@./hack/bench.sh

tidy:
	@for m in $(MODULES); do (cd $$m && $(GO) mod tidy) || exit 1; done

clean:
	rm -rf bin .cache/test-bin

# The demo builds the five services itself (into .cache/test-bin); the first
# run also builds kube-apiserver and etcd (5-15 minutes, with progress).
demo: controlplane
	@mkdir -p bin
	@echo ">> building opswire-demo"
	@cd test && $(GO) build -o ../bin/opswire-demo ./cmd/opswire-demo
	@./bin/opswire-demo $(DEMO_FLAGS)

DRY_RUN ?= 1
RUN_CONFIG ?= deploy/local/config.yml
run: build
	@cd test && $(GO) build -o ../bin/opswire-run ./cmd/opswire-run
	@./bin/opswire-run --bin bin --config $(RUN_CONFIG) --dry-run=$(if $(filter 0 false,$(DRY_RUN)),false,true)

# Container images without a container engine or registry access: static
# binaries per platform (CGO_ENABLED=0, Go's embedded tzdata), one OCI archive
# per service and platform in $(IMAGE_DIR) (scratch + CA bundle of this host +
# non-root user 65532), built by test/cmd/opswire-image (go-containerregistry).
# make push REGISTRY=ghcr.io/acme [TAG=v1.2.3] pushes one multi-platform index
# per service to $(REGISTRY)/opswire-<service>:$(TAG).
IMAGE_PLATFORMS ?= linux/amd64 linux/arm64
IMAGE_DIR       ?= bin/images
IMAGE_BIN       ?= bin/platforms
IMAGE_SOURCE    ?= https://github.com/opswire/opswire
IMAGE_CA_CERTS  ?= /etc/ssl/certs/ca-certificates.crt
REVISION        ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
IMAGE_CREATED   ?= $(shell git log -1 --format=%cI 2>/dev/null)
TAG             ?= $(VERSION)
REGISTRY        ?=
PUSH_FLAGS      ?=
images:
	@for p in $(IMAGE_PLATFORMS); do \
		os=$${p%/*}; arch=$${p#*/}; \
		for s in $(SERVICES); do \
			echo ">> building opswire-$$s for $$p"; \
			CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -tags timetzdata -ldflags '$(LDFLAGS)' \
				-o $(IMAGE_BIN)/$${os}_$${arch}/opswire-$$s ./services/$$s || exit 1; \
		done; \
	done
	@mkdir -p $(IMAGE_BIN)
	@cd test && $(GO) build -o $(abspath $(IMAGE_BIN))/opswire-image ./cmd/opswire-image
	@echo ">> image archives in $(IMAGE_DIR)"
	@$(IMAGE_BIN)/opswire-image build --bin $(IMAGE_BIN) --out $(IMAGE_DIR) --services '$(SERVICES)' \
		--platforms '$(IMAGE_PLATFORMS)' --version '$(VERSION)' --revision '$(REVISION)' --source '$(IMAGE_SOURCE)' \
		--ca-certs '$(IMAGE_CA_CERTS)' $(if $(IMAGE_CREATED),--created '$(IMAGE_CREATED)')

push:
	@test -n "$(REGISTRY)" || { echo "make push REGISTRY=<registry/path> [TAG=$(TAG)]"; exit 2; }
	@test -x $(IMAGE_BIN)/opswire-image || { echo "no images: run make images first"; exit 2; }
	@$(IMAGE_BIN)/opswire-image push --dir $(IMAGE_DIR) --services '$(SERVICES)' --registry '$(REGISTRY)' --tag '$(TAG)' $(PUSH_FLAGS)
