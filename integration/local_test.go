package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"
	"github.com/stretchr/testify/require"

	"github.com/prioq/prioq/internal/redisfind"
)

// localProc is a redis-server or redis-sentinel process of the test's own,
// on loopback (the cluster, Sentinel and half-open tests need several servers
// and faults that containers make awkward). It can be killed and started again
// on the same port and directory.
type localProc struct {
	bin  string
	args []string // without --port and --dir
	host string
	port int
	dir  string
	wrap []string // command to run it under (ip netns exec ...), if any
	cmd  *exec.Cmd
	done chan struct{}
}

// needBinary returns the path of name, or skips the test when it is missing
// (fails under CI=true, where .ci/run installs it).
func needBinary(t *testing.T, name string) string {
	t.Helper()
	bin, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is required under CI=true: %v", name, err)
		}
		t.Skipf("skipping: %v", err)
	}
	return bin
}

// startLocal starts a server from bin with args on a free loopback port in a
// fresh directory, kills it when the test ends, and waits until it answers PING.
func startLocal(t *testing.T, bin string, args ...string) *localProc {
	t.Helper()
	port, err := redisfind.FreePort()
	require.NoError(t, err)
	p := &localProc{bin: bin, args: args, host: "127.0.0.1", port: port, dir: t.TempDir()}
	p.start(t)
	t.Cleanup(p.kill)
	return p
}

func (p *localProc) addr() string { return p.host + ":" + strconv.Itoa(p.port) }

func (p *localProc) start(t *testing.T) {
	t.Helper()
	args := append([]string{p.bin}, p.args...)
	args = append(args, "--port", strconv.Itoa(p.port), "--dir", p.dir)
	if len(p.wrap) > 0 {
		args = append(append([]string(nil), p.wrap...), args...)
	}
	p.cmd = exec.Command(args[0], args[1:]...)
	logf, _ := os.OpenFile(filepath.Join(p.dir, "log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	require.NoError(t, p.cmd.Start())
	p.done = make(chan struct{})
	go func() { _ = p.cmd.Wait(); logf.Close(); close(p.done) }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.Eventually(t, func() bool { return nodeDo(ctx, p.addr(), nil, "PING") == nil }, 10*time.Second, 20*time.Millisecond,
		"%s did not answer on %s", p.bin, p.addr())
}

// kill sends SIGKILL and waits for the process to end. Safe to call twice.
func (p *localProc) kill() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

func (p *localProc) log() string {
	b, _ := os.ReadFile(filepath.Join(p.dir, "log"))
	return string(b)
}

// nodeDo runs one command on a connection of its own.
func nodeDo(ctx context.Context, addr string, rcv interface{}, cmd string, args ...string) error {
	c, err := radix.Dial(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Do(ctx, radix.Cmd(rcv, cmd, args...))
}

// infoField reads one field of INFO section on addr ("" when absent).
func infoField(ctx context.Context, addr, section, field string) string {
	var info string
	if err := nodeDo(ctx, addr, &info, "INFO", section); err != nil {
		return ""
	}
	for _, line := range strings.Split(strings.ReplaceAll(info, "\r", ""), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return v
		}
	}
	return ""
}
