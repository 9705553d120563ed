module github.com/prioq/prioq/cmd/prioq

go 1.25.0

require (
	github.com/mediocregopher/radix/v4 v4.1.4
	github.com/prioq/prioq v0.0.0
	github.com/prioq/prioq/dashboard v0.0.0
	github.com/stretchr/testify v1.12.1
)

require (
	github.com/tilinna/clock v1.0.2 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
)

// The command is built and tested with the prioq next to it.
replace github.com/prioq/prioq => ../../

replace github.com/prioq/prioq/dashboard => ../../dashboard
