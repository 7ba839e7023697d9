# sourcewatch — build, test, benchmark and run.
GO       ?= go
BIN      := bin
# Packages with goroutines of their own run their tests under the race
# detector, the others without it. Each test runs once: running the
# concurrent packages' tests a second time without -race took a fresh
# clone's CI on 2 cores from 5:52 to 10:10 (warm caches) and from 12:03
# to 15:29 (cold), against a 20-minute limit.
RACE_DIRS := monitor alerts forward plugins cmd eval diffusion localize
RACE_PKGS = $(foreach d,$(RACE_DIRS),$(if $(wildcard $(d)/*),./$(d)/...))
MODULE    := github.com/sourcewatch/sourcewatch
empty     :=
space     := $(empty) $(empty)
OTHER_PKGS = $(shell $(GO) list ./... | grep -Ev '^$(MODULE)/($(subst $(space),|,$(strip $(RACE_DIRS))))(/|$$)')

.PHONY: all build test bench fuzz run families ceiling lint proto clean

all: build

# A bundle records its plugin binary's SHA-256 and the daemon refuses
# another build, so a build must depend on the source alone: no VCS stamp
# (a commit or a dirty tree would change every binary) and no build
# directory in the paths.
BUILDFLAGS ?= -trimpath -buildvcs=false
# The sourcewatch binary alone is stamped with the commit (its --version
# and the daemon's start line), so an operator can tell builds apart;
# nothing records its checksum.
# Only from this repository's own git metadata (not a parent directory's),
# and under a name of our own: CI systems often set COMMIT for themselves.
SOURCEWATCH_COMMIT ?= $(shell test -e .git && git describe --always --dirty 2>/dev/null)

build:
	$(GO) build $(BUILDFLAGS) -o $(BIN)/ ./cmd/sourcewatch-forward-...
	$(GO) build $(BUILDFLAGS) -ldflags "-X 'main.commit=$(SOURCEWATCH_COMMIT)'" -o $(BIN)/sourcewatch ./cmd/sourcewatch

test: build lint
	$(if $(strip $(OTHER_PKGS)),$(GO) test $(OTHER_PKGS))
	$(if $(strip $(RACE_PKGS)),$(GO) test -race $(RACE_PKGS))

bench: build
	$(GO) test -run '^$$' -bench . -benchmem ./...

# Coverage-guided fuzzing of everything that reads outside input: edge
# lists, cascade files, event messages, prior encodings, bundles and their
# manifests, config files, service requests, observation files, alert
# messages and plugin states. `make test` runs only their seeds; this
# searches for FUZZTIME each. A failing input lands in the package's
# testdata/fuzz and from then on is a seed `make test` runs. The targets
# are every Fuzz function of the tests (package:FuzzName), so a new one is
# fuzzed without a list to keep.
FUZZTIME ?= 30s
FUZZ_TARGETS := $(shell grep -r --include='*_test.go' -o '^func Fuzz[A-Za-z0-9_]*' . | sed -e 's|^\./||' -e 's|/[^/]*:func |:|' | sort)

fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; fn=$${t#*:}; echo "fuzz ./$$pkg $$fn ($(FUZZTIME))"; \
		$(GO) test ./$$pkg -run '^$$' -fuzz "^$$fn$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 5s; \
	done

# The demo: train a small bundle for Zachary's karate club when it is
# missing, damaged or was trained with another build of the deepis plugin
# (the bundle records the plugin's SHA-256 and the daemon refuses a
# mismatch; `bundle inspect` checks all three), then run the daemon on the
# embedded NATS server, replay simulated cascades into it and print the
# alerts. Ctrl-C stops it.
DEMO_GRAPH  := configs/demo/karate.edges
DEMO_BUNDLE := data/demo/karate.swb

run: build
	@if ! $(BIN)/sourcewatch bundle inspect $(DEMO_BUNDLE) --plugin-dir $(BIN) >/dev/null 2>&1; then \
		mkdir -p $(dir $(DEMO_BUNDLE)) && \
		$(BIN)/sourcewatch train --graph $(DEMO_GRAPH) --diffusion SI --beta 0.25 --pattern cluster \
			--cascades 300 --seed 7 --forward deepis --out $(DEMO_BUNDLE); \
	fi
	$(BIN)/sourcewatch demo --config configs/demo.yaml --log-level warn

# Measure on eleven synthetic graph families unlike the tables' four
# (eval/internal/families): about five minutes on two cores; a table on
# stdout, the rows as JSON in FAMILIES_JSON.
FAMILIES_JSON ?= families.json

families: build
	$(GO) run ./eval/internal/families -sourcewatch $(BIN)/sourcewatch -plugin-dir $(BIN) -json $(FAMILIES_JSON)

# How close SL-VAE comes to the best possible ranking: four graphs of 30-36
# nodes, SI, 3 x 300 cascades each, beside the bayes control (the exact
# posterior); a table on stdout, the rows in CEILING_JSON.
CEILING_JSON ?= ceiling.json
ceiling: build
	$(GO) run ./eval/internal/families -ceiling -sourcewatch $(BIN)/sourcewatch -plugin-dir $(BIN) -json $(CEILING_JSON)

# Regenerate the forward plugin protocol's Go code (committed) from
# forward/proto; needs only Go and the module proxy.
proto:
	sh forward/proto/gen.sh

# staticcheck is pinned here and fetched by the go command like a module,
# so it needs no install and stays out of go.mod.
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2

# lint also vets the diag build (eval's objective diagnostic, see
# eval/ACCURACY.md), which make test leaves out, so it keeps compiling.
lint:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags diag ./eval ./diffusion
	$(GO) run $(STATICCHECK) ./...

clean:
	rm -rf $(BIN)
