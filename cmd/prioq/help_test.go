package main

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// nowhere is a Redis URL that nothing answers: a command that tried to
// connect would wait there for its 5 s timeout.
const nowhere = "redis://10.255.255.1:6379"

// Help needs no Redis: every command's --help and -h, prioq --help, -h,
// help and help <command> print to stdout and exit 0 at once, with the
// URL pointing nowhere.
func TestHelpWithoutRedis(t *testing.T) {
	for i, name := range order {
		for _, flag := range []string{"--help", "-h"}[:1+i%2] { // -h on every other command

			start := time.Now()
			out, errOut, code := prioqRun(t, nil, "", "--url", nowhere, name, flag)
			assert.Equal(t, 0, code, "%s %s: %s", name, flag, errOut)
			assert.Empty(t, errOut, name)
			assert.True(t, strings.HasPrefix(out, "usage: prioq [--url URL] "+name), "%s %s: %q", name, flag, out)
			assert.Less(t, time.Since(start), 2*time.Second, "%s %s: no connection tried", name, flag)
		}
	}
	out, _, code := prioqRun(t, nil, "", "--url", nowhere, "stats", "orders", "--watch", "1s", "--help")
	assert.Equal(t, 0, code, "help after the arguments too")
	assert.Contains(t, out, "--watch D")
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}, {"--url", nowhere, "help"}} {
		out, _, code := prioqRun(t, nil, "", args...)
		assert.Equal(t, 0, code, "%v", args)
		assert.Contains(t, out, "commands:", "%v", args)
		for _, name := range order {
			assert.Contains(t, out, "\n  "+name+" ", "%v lists %s", args, name)
		}
	}
	out, _, code = prioqRun(t, nil, "", "help", "web")
	assert.Equal(t, 0, code)
	assert.Contains(t, out, "$PRIOQ_WEB_TOKEN")

	_, errOut, code := prioqRun(t, nil, "", "help", "frobnicate")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "unknown command")
	_, errOut, code = prioqRun(t, nil, "")
	assert.Equal(t, 2, code, "no command is a usage error")
	assert.Contains(t, errOut, "usage:")
}

// prioq version needs no Redis and says the module's version, the commit
// it was built from and Go's version.
func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}, {"--url", nowhere, "version"}} {
		out, errOut, code := prioqRun(t, nil, "", args...)
		require.Equal(t, 0, code, errOut)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		require.GreaterOrEqual(t, len(lines), 3, out)
		assert.Equal(t, "prioq (devel) (github.com/prioq/prioq/cmd/prioq)", lines[0], "built from a checkout")
		assert.True(t, strings.HasPrefix(lines[1], "commit "), lines[1])
		assert.Contains(t, out, "github.com/prioq/prioq ")
		assert.Contains(t, out, "go1.")
	}
}

// Built in a git repository with version control stamping, prioq version
// names the commit, and "+dirty" when the tree had changes. The test
// copies the modules the command is built from into a fresh repository
// (a git worktree, as CI and development may use, is not stamped by Go).
func TestVersionNamesTheCommit(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		top := strings.Split(rel, string(filepath.Separator))[0]
		switch {
		case d.Name() == ".git" && !d.IsDir():
			return nil // a worktree's pointer to its repository: never followed
		case d.Name() == ".git" || (d.IsDir() && (top == "bench" || top == "integration" || top == "docs" || top == "prioqotel" || top == "prioqprom")):
			return filepath.SkipDir
		case d.IsDir():
			return os.MkdirAll(filepath.Join(dir, rel), 0o755)
		case !d.Type().IsRegular():
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, rel), b, 0o644)
	}))
	git := func(args ...string) string {
		cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"}, args...)...)
		cmd.Dir = dir
		// This repository and no other, whatever the environment says.
		cmd.Env = append(os.Environ(), "GIT_DIR="+filepath.Join(dir, ".git"), "GIT_WORK_TREE="+dir, "GIT_CEILING_DIRECTORIES="+filepath.Dir(dir))
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "git %v: %s", args, out)
		return strings.TrimSpace(string(out))
	}
	git("init", "-q")
	git("add", "-A")
	git("commit", "-q", "-m", "test")
	head := git("rev-parse", "HEAD")
	build := func() string {
		exe := filepath.Join(dir, "prioq-stamped")
		cmd := exec.Command("go", "build", "-buildvcs=true", "-o", exe, ".")
		cmd.Dir = filepath.Join(dir, "cmd", "prioq")
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-buildvcs=true")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		v, err := exec.Command(exe, "version").Output()
		require.NoError(t, err)
		require.NoError(t, os.Remove(exe))
		return string(v)
	}
	out := build()
	assert.Contains(t, out, "\ncommit "+head+" ")
	assert.NotContains(t, out, "+dirty")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cmd", "prioq", "extra.go"), []byte("package main\n"), 0o644))
	assert.Contains(t, build(), "\ncommit "+head+"+dirty ")
}
