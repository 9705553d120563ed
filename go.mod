module github.com/prioq/prioq

go 1.23.0

require github.com/mediocregopher/radix/v4 v4.1.4

require github.com/tilinna/clock v1.0.2 // indirect
