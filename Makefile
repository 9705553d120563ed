.PHONY: test test-race lint bench bench-quick fuzz

test:
	go test ./...

test-race:
	go test -race -count=1 ./...

lint:
	test -z "$$(gofmt -l .)" || (gofmt -l . && exit 1)
	go vet ./...
	@if command -v staticcheck >/dev/null; then staticcheck ./...; else echo "staticcheck not installed: skipped"; fi

bench:
	go run ./bench

bench-quick:
	go run ./bench -quick

fuzz:
	go test -run XXX -fuzz FuzzEnvelopeDecode -fuzztime 30s .
	go test -run XXX -fuzz FuzzEnvelopeRoundTrip -fuzztime 30s .
	go test -run XXX -fuzz FuzzScoreRoundTrip -fuzztime 30s .
