//go:build linux

package main

import (
	"io"
	"os"
	"syscall"
	"unsafe"
)

// isTerminal reports whether w is a terminal: a file whose terminal
// settings can be read (a pipe, a file or /dev/null cannot).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	var t syscall.Termios
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), syscall.TCGETS, uintptr(unsafe.Pointer(&t)))
	return errno == 0
}
