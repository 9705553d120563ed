// Package redisfind finds a Redis server for prioq's tests and benchmark:
// PRIOQ_REDIS_ADDR when set, else a server binary on PATH started on a free
// loopback port in a temporary directory: redis-server, or the one
// PRIOQ_SERVER names (valkey-server: `make test` runs the tests on both).
// `make test` and `make bench` install both when they are missing
// (scripts/setup); the Docker suite in integration/ builds its image from
// the same binary.
package redisfind

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// ServerEnv names the environment variable that chooses the server binary
// tests start (Binary): redis-server when it is unset.
const ServerEnv = "PRIOQ_SERVER"

// Binary is the server binary the tests start: $PRIOQ_SERVER, or
// redis-server.
func Binary() string {
	if b := os.Getenv(ServerEnv); b != "" {
		return b
	}
	return "redis-server"
}

// Server is a Redis found or started for a test run.
type Server struct {
	Addr string // host:port
	How  string // how it was found, for logs: "PRIOQ_REDIS_ADDR", "redis-server 7.0.15 on PATH", ...
	stop func()
}

// Stop stops the server if this package started it. Safe to call twice.
func (s *Server) Stop() {
	if s != nil && s.stop != nil {
		s.stop()
		s.stop = nil
	}
}

// ErrNoRedis is returned when no way to get a Redis worked.
var ErrNoRedis = errors.New("redisfind: no Redis: set PRIOQ_REDIS_ADDR, or install redis-server and valkey-server (make test and make bench install them)")

// Find returns a Redis to use. extraArgs are added to a server this package
// starts (e.g. "--appendonly", "yes").
func Find(ctx context.Context, extraArgs ...string) (*Server, error) {
	if addr := os.Getenv("PRIOQ_REDIS_ADDR"); addr != "" {
		return &Server{Addr: addr, How: "PRIOQ_REDIS_ADDR=" + addr}, nil
	}
	var errs []error
	name := Binary()
	if bin, err := exec.LookPath(name); err == nil {
		s, err := StartBinary(ctx, bin, extraArgs...)
		if err == nil {
			return s, nil
		}
		errs = append(errs, err)
	} else {
		errs = append(errs, err)
	}
	return nil, errors.Join(append([]error{ErrNoRedis}, errs...)...)
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// StartBinary starts bin on a free loopback port in a fresh temporary
// directory, with persistence off unless extraArgs turn it on, and waits until
// it answers PING.
func StartBinary(ctx context.Context, bin string, extraArgs ...string) (*Server, error) {
	dir, err := os.MkdirTemp("", "prioq-redis-")
	if err != nil {
		return nil, err
	}
	var lastErr error
	for try := 0; try < 3; try++ { // the free port can be taken between check and bind
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		args := append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
			"--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning"}, extraArgs...)
		cmd := exec.Command(bin, args...)
		logf, _ := os.Create(filepath.Join(dir, "redis.log"))
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("redisfind: start %s: %w", bin, err)
		}
		addr := "127.0.0.1:" + strconv.Itoa(port)
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		stop := func() {
			_ = cmd.Process.Signal(os.Interrupt)
			select {
			case <-exited:
			case <-time.After(5 * time.Second):
				_ = cmd.Process.Kill()
				<-exited
			}
			logf.Close()
			os.RemoveAll(dir)
		}
		version, err := waitPing(ctx, addr, exited)
		if err == nil {
			return &Server{Addr: addr, How: version + " on PATH (" + bin + "), port " + strconv.Itoa(port), stop: stop}, nil
		}
		lastErr = err
		stop()
		dir, _ = os.MkdirTemp("", "prioq-redis-")
	}
	return nil, fmt.Errorf("redisfind: %s did not start: %w", filepath.Base(bin), lastErr)
}

// waitPing polls addr with a raw RESP PING until it answers, and returns the
// server version from INFO.
func waitPing(ctx context.Context, addr string, exited <-chan struct{}) (string, error) {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return "", errors.New("the server exited")
		case <-ctx.Done():
			return "", ctx.Err()
		default:
		}
		if v, err := Version(addr); err == nil {
			return v, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return "", fmt.Errorf("no answer on %s after 10s", addr)
}

// Version asks the server at addr what it is over a plain connection:
// "redis-server 7.0.15", "valkey-server 8.0.1" (Valkey reports a
// redis_version for compatibility, and its own in valkey_version).
func Version(addr string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n")); err != nil {
		return "", err
	}
	r := bufio.NewReader(c)
	head, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	head = strings.TrimSpace(head)
	if strings.HasPrefix(head, "-") {
		return "", errors.New(head)
	}
	n, err := strconv.Atoi(strings.TrimPrefix(head, "$"))
	if err != nil || !strings.HasPrefix(head, "$") {
		return "", fmt.Errorf("redisfind: INFO replied %q", head)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return "", err
	}
	var redis, valkey string
	for _, line := range strings.Split(string(body), "\n") {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "redis_version:"); ok {
			redis = v
		}
		if v, ok := strings.CutPrefix(line, "valkey_version:"); ok {
			valkey = v
		}
	}
	if redis == "" {
		return "", errors.New("redisfind: INFO server has no redis_version")
	}
	if valkey != "" {
		return "valkey-server " + valkey, nil
	}
	return "redis-server " + redis, nil
}
