//go:build !linux

package prioq

import (
	"syscall"
	"time"
)

// userTimeoutControl is a no-op where TCP_USER_TIMEOUT does not exist; TCP
// keepalive and the stuck-call guard still apply.
func userTimeoutControl(time.Duration) func(network, address string, c syscall.RawConn) error {
	return nil
}
