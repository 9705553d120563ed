//go:build !linux

package main

import (
	"errors"
	"os"
)

func openPTY() (pty, tty *os.File, err error) {
	return nil, nil, errors.New("the test opens a pseudo-terminal on Linux only")
}
