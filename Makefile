# timeoutmill — `make help` lists the targets.
GO          ?= go
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.7.0
SERVICES    := scripts/services.sh
BENCH       ?= full

.DEFAULT_GOAL := help
.PHONY: help run test test-short lint up down bench screenshot api-check api-baseline

help: ## List the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

run: ## The quick start: GoChannel + embedded SQLite, no server needed (~6 s)
	$(GO) run ./examples/quickstart

test: ## Every test, with -race, against real RabbitMQ, PostgreSQL, MariaDB, Redis and NATS that it installs and starts
	scripts/test.sh

test-short: ## Unit tests only, no servers (tests needing one say they were skipped)
	$(GO) test -short -race -count=1 ./...

lint: ## gofmt, go vet, staticcheck and the API check
	@out=$$(gofmt -l $$(git ls-files '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...
	GO=$(GO) scripts/apicheck.sh

api-check: ## Compare the public API with api/ (apidiff); a break must be named in CHANGELOG.md [Unreleased]
	GO=$(GO) scripts/apicheck.sh

api-baseline: ## Record the tree's public API as the baseline in api/ (after api-check passes)
	GO=$(GO) scripts/apicheck.sh baseline

up: ## Install and start the test servers on loopback (idempotent)
	$(SERVICES) up

down: ## Stop the test servers
	$(SERVICES) down

bench: ## Measure delayed delivery beside the peers, one table (BENCH=quick: < 2 min; full: about 25 min)
	$(GO) run ./cmd/timeoutbench -mode $(BENCH)

screenshot: ## Render the dashboard in headless Chromium to docs/dashboard.png (installs chromium as root)
	$(GO) run ./internal/screenshot -out docs/dashboard.png -chromium "$$(scripts/chromium.sh)"

# Release artifacts (.goreleaser.yaml). The first run compiles goreleaser itself, which takes a while.
GORELEASER := github.com/goreleaser/goreleaser/v2@v2.16.0
CA_CERTS   ?= $(wildcard /etc/ssl/certs/ca-certificates.crt)
GOARCH_HOST = $(shell $(GO) env GOARCH)
.PHONY: release-snapshot image

release-snapshot: ## Release artifacts in dist/, unpublished: linux and darwin binaries, linux images, SBOMs, checksums
	TIMEOUTMILL_CA_CERTS=$(CA_CERTS) $(GO) run $(GORELEASER) release --snapshot --clean

image: ## Only the container image for this machine, dist/timeoutmill_linux_ARCH.image.tar (podman load -i it)
	CGO_ENABLED=0 GOOS=linux $(GO) build -trimpath -buildvcs=true -ldflags='-s -w' -o dist/image/timeoutmill ./cmd/timeoutmill
	$(GO) run ./internal/release/mkimage -binary dist/image/timeoutmill $(if $(CA_CERTS),-ca-certs $(CA_CERTS)) \
	  -out dist/timeoutmill_linux_$(GOARCH_HOST).image.tar
