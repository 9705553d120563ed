module github.com/prioq/prioq/dashboard

go 1.25.0

require (
	github.com/chromedp/cdproto v0.0.0-20250724212937-08a3db8b4327
	github.com/chromedp/chromedp v0.14.2
	github.com/mediocregopher/radix/v4 v4.1.4
	github.com/prioq/prioq v0.0.0
	github.com/stretchr/testify v1.12.1
)

require (
	github.com/chromedp/sysutil v1.1.0 // indirect
	github.com/go-json-experiment/json v0.0.0-20250725192818-e39067aee2d2 // indirect
	github.com/gobwas/httphead v0.1.0 // indirect
	github.com/gobwas/pool v0.2.1 // indirect
	github.com/gobwas/ws v1.4.0 // indirect
	github.com/tilinna/clock v1.0.2 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sys v0.34.0 // indirect
)

// The dashboard is built and tested with the prioq next to it.
replace github.com/prioq/prioq => ../
