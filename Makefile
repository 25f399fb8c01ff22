# typedinformer: the two commands a fresh machine needs are `make demo` and `make test`.
# Both build the local control plane (etcd and kube-apiserver, from Go modules) on first
# use into .cache/bin, which is git-ignored.

SHELL := /bin/bash
GO ?= go
BIN := $(CURDIR)/.cache/bin
export TYPEDINFORMER_CONTROLPLANE_BIN := $(BIN)
FUZZTIME ?= 30s
BENCHTIME ?= 1x

.PHONY: all test unit vet demo demo-shards bench fuzz soak testdata controlplane clean

all: test

## controlplane: build etcd and kube-apiserver once (a few minutes the first time)
controlplane:
	@bash internal/tools/build.sh $(BIN)

# NESTED: Go modules of their own inside the repository, which ./... does not reach and
# which make vet and make test cover too (the Prometheus adapter, kept out of the
# library's go.mod, and the example mains that use it).
NESTED := typed/metrics/prometheus examples/website/cmd/website-operator examples/cronjob/cmd/cronjob-operator

## vet: gofmt and go vet over the library, the examples, the end-to-end tests and the nested modules
vet:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$unformatted" ]; then echo "not gofmt'ed: $$unformatted"; exit 1; fi
	$(GO) vet ./...
	@for d in $(NESTED); do echo "(cd $$d && $(GO) vet ./...)"; (cd $$d && $(GO) vet ./...) || exit 1; done

## test: vet, then every test (unit, fuzz seeds, end-to-end on a real control plane) with -race,
## the nested modules' (NESTED) included.
## The whole output is kept in .cache/test.log; on failure, what failed is repeated at the
## end (the first two data races whole, then each failure), since a timeout's goroutine dump
## would otherwise bury the name of the test that hung.
test: controlplane vet
	@mkdir -p .cache
	{ $(GO) test -race -count=1 -timeout 30m ./...; s=$$?; \
	  for d in $(NESTED); do (cd $$d && $(GO) test -race -count=1 -timeout 10m ./...) || s=1; done; exit $$s; } 2>&1 | tee .cache/test.log; status=$${PIPESTATUS[0]}; \
	if [ $$status -ne 0 ]; then \
		echo "== what failed (the whole output is in .cache/test.log) =="; \
		awk '/^WARNING: DATA RACE/{r=1; n++} r && n <= 2 {print} r && /^==================/{r=0}' .cache/test.log | head -n 150; \
		grep -E -A4 '^(--- FAIL|FAIL|panic: |running tests:)' .cache/test.log | head -n 150; \
	fi; exit $$status

## unit: the tests that need no control plane (every end-to-end test is in internal/e2e, typed/testenv or examples)
unit:
	$(GO) test -race -count=1 $$($(GO) list ./... | grep -v -e /e2e -e /typed/testenv -e /examples)

## fuzz: run every fuzz target for FUZZTIME each
fuzz:
	@GO=$(GO) bash internal/tools/fuzz.sh $(FUZZTIME) \
		./eventcache/:FuzzEventQueueCollection ./event/:FuzzObjectKey ./event/:FuzzNotNewerAgreesWithParsing ./event/:FuzzUIDNote \
		./queue/:FuzzCompression ./queue/:FuzzIndexedFIFOMatchesMapFIFO ./queue/:FuzzAppliedIsALowWatermark ./reflect/:FuzzReflectorWatchEvents \
		./typed/client/:FuzzOmitter

## demo: run the example typed controller against $$KUBECONFIG, or a local control plane
demo: $(if $(KUBECONFIG),,controlplane)
	$(GO) run ./examples/demo

## demo-shards: sharding against $$KUBECONFIG or a local control plane: 3 replicas divide 1,000 ConfigMaps, one is killed, one added; a line a second of who holds what
demo-shards: $(if $(KUBECONFIG),,controlplane)
	$(GO) run ./examples/shards

## bench: benchmarks side by side with client-go, then writes BENCHMARKS.md. First the real API
## server benchmark with controller-runtime as a third column (internal/bench/realapi, a module
## of its own so that controller-runtime stays out of the library's go.mod, and out of NESTED: it
## has no tests, and vetting it would build controller-runtime in every make test) writes
## .cache/realapi.md, which BENCHMARKS.md includes; REALAPI_FLAGS to narrow it.
REALAPI_FLAGS ?= -rounds 5
bench: controlplane
	cd internal/bench/realapi && $(GO) vet . && $(GO) run . $(REALAPI_FLAGS) -o $(CURDIR)/.cache/realapi.md
	$(GO) run ./internal/cmd/benchreport -benchtime $(BENCHTIME)

## soak: several minutes of churn against the local control plane, heap and goroutines over time
soak: $(if $(KUBECONFIG),,controlplane)
	$(GO) run ./examples/soak

## testdata: record testdata/watch/configmaps.json (the replay tests' list and watch stream) anew from a local kube-apiserver
testdata: controlplane
	$(GO) run ./internal/cmd/record -o testdata/watch/configmaps.json

clean:
	rm -rf .cache
