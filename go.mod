module github.com/prioq/prioq

go 1.22

require (
	github.com/mediocregopher/radix/v4 v4.1.4
	github.com/stretchr/testify v1.12.1
)

require (
	github.com/tilinna/clock v1.0.2 // indirect
	go.uber.org/goleak v1.3.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
)
