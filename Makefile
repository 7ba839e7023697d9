# sourcewatch — build, test, benchmark and run.
GO       ?= go
BIN      := bin
# Packages with goroutines of their own run their tests under the race detector.
RACE_DIRS := monitor alerts forward plugins
RACE_PKGS = $(foreach d,$(RACE_DIRS),$(if $(wildcard $(d)/*),./$(d)/...))

.PHONY: all build test bench run lint proto clean

all: build

build:
	$(GO) build -o $(BIN)/ ./cmd/...

test: build
	$(GO) vet ./...
	$(GO) test ./...
	$(if $(strip $(RACE_PKGS)),$(GO) test -race $(RACE_PKGS))

bench: build
	$(GO) test -run '^$$' -bench . -benchmem ./...

run: build
	@echo "make run: the daemon is not yet available"

lint:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

clean:
	rm -rf $(BIN)
