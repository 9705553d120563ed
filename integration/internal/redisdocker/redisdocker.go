// Package redisdocker runs Redis in Docker for prioq's integration tests,
// offline: the image is PRIOQ_REDIS_IMAGE, else redis:7 when it is
// present or can be pulled, else a minimal image built here from the local
// redis-server binary and the libraries ldd lists (docker import of a rootfs).
// It is internal to the integration module, so dockertest stays out of the
// library's import graph.
package redisdocker

import (
	"archive/tar"
	"bufio"
	"bytes"
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
	"sync"
	"time"

	"github.com/ory/dockertest/v3"
	dc "github.com/ory/dockertest/v3/docker"

	"github.com/prioq/prioq/internal/redisfind"
)

// ErrNoDocker is returned when no Docker daemon answers.
var ErrNoDocker = errors.New("redisdocker: Docker is not reachable")

// Connect returns a dockertest pool whose daemon answered a ping within 3s.
func Connect() (*dockertest.Pool, error) {
	pool, err := dockertest.NewPool("")
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoDocker, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := pool.Client.PingWithContext(ctx); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoDocker, err)
	}
	pool.MaxWait = 30 * time.Second
	ReapStale(pool)
	return pool, nil
}

// Image names a Redis image and how to start redis-server in it.
type Image struct {
	Repository, Tag string
	Entrypoint      []string // empty: the image's own
	How             string   // for logs
}

var (
	imageOnce sync.Once
	image     Image
	imageErr  error
)

// EnsureImage finds or builds the image once per process.
func EnsureImage(pool *dockertest.Pool) (Image, error) {
	imageOnce.Do(func() { image, imageErr = ensureImage(pool) })
	return image, imageErr
}

func ensureImage(pool *dockertest.Pool) (Image, error) {
	if ref := os.Getenv("PRIOQ_REDIS_IMAGE"); ref != "" {
		repo, tag := splitRef(ref)
		if _, err := pool.Client.InspectImage(repo + ":" + tag); err != nil {
			return Image{}, fmt.Errorf("redisdocker: PRIOQ_REDIS_IMAGE=%s: %w", ref, err)
		}
		return Image{Repository: repo, Tag: tag, How: "PRIOQ_REDIS_IMAGE=" + ref}, nil
	}
	if _, err := pool.Client.InspectImage("redis:7"); err == nil {
		return Image{Repository: "redis", Tag: "7", How: "redis:7 (present)"}, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	err := pool.Client.PullImage(dc.PullImageOptions{Repository: "redis", Tag: "7", Context: ctx}, dc.AuthConfiguration{})
	cancel()
	if err == nil {
		return Image{Repository: "redis", Tag: "7", How: "redis:7 (pulled)"}, nil
	}
	return buildLocal(pool)
}

func splitRef(ref string) (string, string) {
	if i := strings.LastIndex(ref, ":"); i > 0 && !strings.Contains(ref[i:], "/") {
		return ref[:i], ref[i+1:]
	}
	return ref, "latest"
}

// buildLocal imports a rootfs holding the local redis-server (the real file
// behind Debian's symlink, keeping the name redis-server), every library ldd
// lists including the loader, /tmp (1777) and /data. The tag carries the
// binary's size and time, so a changed binary gets a new image.
func buildLocal(pool *dockertest.Pool) (Image, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		// No binary here, but an image built earlier may still be present.
		imgs, lerr := pool.Client.ListImages(dc.ListImagesOptions{Filters: map[string][]string{"reference": {"prioq-redis-local"}}})
		if lerr == nil && len(imgs) > 0 && len(imgs[0].RepoTags) > 0 {
			repo, tag := splitRef(imgs[0].RepoTags[0])
			return Image{Repository: repo, Tag: tag, Entrypoint: []string{"/usr/bin/redis-server"}, How: imgs[0].RepoTags[0] + " (built earlier)"}, nil
		}
		return Image{}, fmt.Errorf("redisdocker: no image and no local redis-server to build one from (apt-get install redis-server): %w", err)
	}
	real, err := filepath.EvalSymlinks(bin)
	if err != nil {
		return Image{}, err
	}
	st, err := os.Stat(real)
	if err != nil {
		return Image{}, err
	}
	tag := fmt.Sprintf("%d-%d", st.Size(), st.ModTime().Unix())
	img := Image{Repository: "prioq-redis-local", Tag: tag, Entrypoint: []string{"/usr/bin/redis-server"},
		How: "prioq-redis-local:" + tag + " (built from " + real + ")"}
	if _, err := pool.Client.InspectImage(img.Repository + ":" + tag); err == nil {
		return img, nil
	}
	libs, err := lddLibs(real)
	if err != nil {
		return Image{}, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	addDir := func(d string, mode int64) {
		if d == "/" || d == "." || dirs[d] {
			return
		}
		dirs[d] = true
		_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(d, "/") + "/", Mode: mode})
	}
	var parents func(string)
	parents = func(p string) {
		d := filepath.Dir(p)
		if d != "/" && !dirs[d] {
			parents(d)
			addDir(d, 0o755)
		}
	}
	addFile := func(src, dst string) error {
		b, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		parents(dst)
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(dst, "/"), Mode: 0o755, Size: int64(len(b))}); err != nil {
			return err
		}
		_, err = tw.Write(b)
		return err
	}
	addDir("/tmp", 0o1777)
	addDir("/data", 0o777)
	if err := addFile(real, "/usr/bin/redis-server"); err != nil {
		return Image{}, err
	}
	for _, l := range libs {
		rl, err := filepath.EvalSymlinks(l)
		if err != nil {
			return Image{}, err
		}
		if err := addFile(rl, l); err != nil { // at the path the binary asks for
			return Image{}, err
		}
	}
	if err := tw.Close(); err != nil {
		return Image{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err = pool.Client.ImportImage(dc.ImportImageOptions{Repository: img.Repository, Tag: tag, Source: "-",
		InputStream: &buf, OutputStream: io.Discard, Context: ctx})
	if err != nil {
		return Image{}, fmt.Errorf("redisdocker: importing the local image: %w", err)
	}
	return img, nil
}

// lddLibs lists the absolute library paths ldd prints for bin.
func lddLibs(bin string) ([]string, error) {
	out, err := exec.Command("ldd", bin).Output()
	if err != nil {
		return nil, fmt.Errorf("redisdocker: ldd %s: %w", bin, err)
	}
	var libs []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		for _, f := range strings.Fields(sc.Text()) {
			if strings.HasPrefix(f, "/") {
				libs = append(libs, f)
			}
		}
	}
	return libs, nil
}

// ReapStale removes containers left by test processes that no longer run (a
// test binary that panics on its timeout skips its cleanup). Containers of
// live processes, such as a concurrent test run, are left alone.
func ReapStale(pool *dockertest.Pool) {
	cs, err := pool.Client.ListContainers(dc.ListContainersOptions{All: true, Filters: map[string][]string{"label": {"prioq-test-pid"}}})
	if err != nil {
		return
	}
	for _, c := range cs {
		pid, err := strconv.Atoi(c.Labels["prioq-test-pid"])
		if err != nil || pid <= 0 || processAlive(pid) {
			continue
		}
		_ = pool.Client.RemoveContainer(dc.RemoveContainerOptions{ID: c.ID, Force: true, RemoveVolumes: true})
	}
}

func processAlive(pid int) bool {
	_, err := os.Stat("/proc/" + strconv.Itoa(pid))
	return err == nil
}

// Container is one Redis in Docker, bound to a fixed loopback port so that it
// keeps its address across stop/start and restart.
type Container struct {
	Pool     *dockertest.Pool
	Resource *dockertest.Resource
	Addr     string // 127.0.0.1:PORT
	Image    Image
}

// Options configure Run.
type Options struct {
	// Args are extra redis-server arguments (e.g. "--appendonly", "yes").
	Args []string
	// Name prefixes the container name, for `docker ps`.
	Name string
}

// Run starts a Redis container and waits until it answers PING. The caller
// must Purge it (tests: t.Cleanup), also when the test fails.
func Run(pool *dockertest.Pool, o Options) (*Container, error) {
	img, err := EnsureImage(pool)
	if err != nil {
		return nil, err
	}
	port, err := redisfind.FreePort()
	if err != nil {
		return nil, err
	}
	args := append([]string{"--protected-mode", "no", "--port", "6379", "--dir", "/data"}, o.Args...)
	opts := &dockertest.RunOptions{
		Repository:   img.Repository,
		Tag:          img.Tag,
		Entrypoint:   img.Entrypoint,
		Cmd:          args,
		ExposedPorts: []string{"6379/tcp"},
		PortBindings: map[dc.Port][]dc.PortBinding{"6379/tcp": {{HostIP: "127.0.0.1", HostPort: strconv.Itoa(port)}}},
		Labels:       map[string]string{"prioq-test": "1", "prioq-test-pid": strconv.Itoa(os.Getpid())},
	}
	if img.Entrypoint == nil { // the official image: its entrypoint takes redis-server args
		opts.Cmd = append([]string{"redis-server"}, args...)
	}
	if o.Name != "" {
		opts.Name = fmt.Sprintf("prioq-%s-%d", o.Name, time.Now().UnixNano())
	}
	res, err := pool.RunWithOptions(opts, func(hc *dc.HostConfig) { hc.AutoRemove = false })
	if err != nil {
		return nil, fmt.Errorf("redisdocker: run %s:%s: %w", img.Repository, img.Tag, err)
	}
	c := &Container{Pool: pool, Resource: res, Addr: "127.0.0.1:" + strconv.Itoa(port), Image: img}
	if err := c.WaitReady(30 * time.Second); err != nil {
		logs := c.Logs()
		_ = c.Purge()
		return nil, fmt.Errorf("%w; container log:\n%s", err, logs)
	}
	return c, nil
}

// WaitReady waits until the server answers PING (or, with a password, asks for it).
func (c *Container) WaitReady(d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		err := ping(c.Addr)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redisdocker: %s not ready after %v: %w", c.Addr, d, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func ping(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if strings.HasPrefix(line, "+PONG") || strings.HasPrefix(line, "-NOAUTH") {
		return nil
	}
	return fmt.Errorf("unexpected reply %q", strings.TrimSpace(line))
}

// ID is the Docker container id.
func (c *Container) ID() string { return c.Resource.Container.ID }

// Pause freezes the Redis process; TCP connections stay open.
func (c *Container) Pause() error { return c.Pool.Client.PauseContainer(c.ID()) }

// Unpause resumes a paused container.
func (c *Container) Unpause() error { return c.Pool.Client.UnpauseContainer(c.ID()) }

// Kill sends SIGKILL: no shutdown, no final save.
func (c *Container) Kill() error {
	return c.Pool.Client.KillContainer(dc.KillContainerOptions{ID: c.ID(), Signal: dc.SIGKILL})
}

// Start starts a stopped or killed container and waits until it answers.
func (c *Container) Start() error {
	if err := c.Pool.Client.StartContainer(c.ID(), nil); err != nil {
		return err
	}
	return c.WaitReady(30 * time.Second)
}

// Disconnect cuts the container off its networks (published ports stop
// answering); Connect restores them. Returns the network ids it left.
func (c *Container) Disconnect() ([]string, error) {
	ct, err := c.Pool.Client.InspectContainer(c.ID())
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, n := range ct.NetworkSettings.Networks {
		if err := c.Pool.Client.DisconnectNetwork(n.NetworkID, dc.NetworkConnectionOptions{Container: c.ID(), Force: true}); err != nil {
			return ids, err
		}
		ids = append(ids, n.NetworkID)
	}
	return ids, nil
}

// Connect reattaches the container to the given networks.
func (c *Container) Connect(ids []string) error {
	for _, id := range ids {
		if err := c.Pool.Client.ConnectNetwork(id, dc.NetworkConnectionOptions{Container: c.ID()}); err != nil {
			return err
		}
	}
	return nil
}

// Logs returns the container's output, for failure messages.
func (c *Container) Logs() string {
	var b bytes.Buffer
	_ = c.Pool.Client.Logs(dc.LogsOptions{Container: c.ID(), OutputStream: &b, ErrorStream: &b, Stdout: true, Stderr: true})
	return b.String()
}

// Purge removes the container and its volumes.
func (c *Container) Purge() error { return c.Pool.Purge(c.Resource) }
