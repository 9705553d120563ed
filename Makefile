# The README's two commands: `make bench` (the benchmark, about a minute)
# and `make test` (every module's tests). Both install redis-server first
# when it is missing (scripts/setup).
.PHONY: bench bench-full test lint setup fuzz

bench: setup
	go run ./bench $(ARGS)

bench-full: setup
	go run ./bench -full $(ARGS)

test: setup
	scripts/test

lint:
	scripts/lint

setup:
	@scripts/setup

fuzz:
	go test -run XXX -fuzz FuzzEnvelopeDecode -fuzztime 30s .
	go test -run XXX -fuzz FuzzEnvelopeRoundTrip -fuzztime 30s .
	go test -run XXX -fuzz FuzzScoreRoundTrip -fuzztime 30s .
