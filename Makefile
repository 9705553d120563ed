# The README's two commands: `make bench` (the benchmark, about a minute)
# and `make test` (every module's tests, on Redis, and the library's and the
# cluster tests on Valkey too: scripts/test). Both install redis-server and
# valkey-server first when they are missing (scripts/setup).
.PHONY: bench bench-full test lint setup fuzz

# Every module of the workspace (go.work): the library, bench, cmd/prioq,
# dashboard, integration, prioqotel, prioqprom.
PKGS := github.com/prioq/prioq/...
# The race detector needs cgo and a C compiler; without them tests run plain.
RACE := $(shell [ "$$(go env CGO_ENABLED)" = 1 ] && command -v "$$(go env CC)" >/dev/null 2>&1 && echo -race)

bench: setup
	go run ./bench $(ARGS)

bench-full: setup
	go run ./bench -full $(ARGS)

test: setup
	@scripts/test-env $(RACE)
	go vet $(PKGS)
	scripts/test $(RACE)

lint:
	scripts/lint

setup:
	@scripts/setup

fuzz:
	go test -run XXX -fuzz FuzzEnvelopeDecode -fuzztime 30s ./internal/store
	go test -run XXX -fuzz FuzzEnvelopeRoundTrip -fuzztime 30s ./internal/store
	go test -run XXX -fuzz FuzzScoreRoundTrip -fuzztime 30s ./internal/store
