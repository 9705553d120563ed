module github.com/prioq/prioq/cmd/prioq

go 1.23.0

require (
	github.com/mediocregopher/radix/v4 v4.1.4
	github.com/prioq/prioq v0.0.0
	github.com/stretchr/testify v1.2.2
)

require (
	github.com/davecgh/go-spew v1.1.1 // indirect
	github.com/pmezard/go-difflib v1.0.0 // indirect
	github.com/tilinna/clock v1.0.2 // indirect
)

// The command is built and tested with the prioq next to it.
replace github.com/prioq/prioq => ../../
