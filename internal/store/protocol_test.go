package store

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq/internal/testkit/assert"
	"github.com/prioq/prioq/internal/testkit/require"
)

// The scripts read envelopes with the prelude's helpers and offsets; they
// must read what encode wrote, and what they write must decode, with and
// without a sequence number in front (Range members).
func TestLuaReadsEnvelopesAsGoWritesThem(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := newClient(t)
	script := radix.NewEvalScript(scriptText(`-- include: envelope
local off = tonumber(ARGV[2])
local id, caller = env_id(ARGV[1], off)
local a = attempts(ARGV[1], off)
return {id, caller and 1 or 0, a, with_attempts(ARGV[1], off, a + 1)}`))
	for _, tc := range []struct {
		name   string
		prefix string
		e      Envelope
	}{
		{"generated id", "", Envelope{ID: "01ABCDEFGH", Priority: -5, EnqueuedMs: 1700000000123, Attempts: 0, Payload: []byte("p")}},
		{"caller id, many attempts", "", Envelope{ID: "order-77", CallerID: true, Priority: 1 << 40, EnqueuedMs: 1, Attempts: 1<<24 + 3, Payload: []byte("payload|with|bars")}},
		{"longest id, seq in front", "\x00\x00\x00\x00\x00\x00\x01\x02", Envelope{ID: strings.Repeat("z", maxIDLen), CallerID: true, Attempts: 41, Payload: []byte{0}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			require.NoError(t, c.Do(ctx, script.Cmd(&got, nil, tc.prefix+string(tc.e.Encode()), itoa(len(tc.prefix)))))
			require.Len(t, got, 4)
			assert.Equal(t, tc.e.ID, got[0])
			assert.Equal(t, map[bool]string{true: "1", false: "0"}[tc.e.CallerID], got[1])
			assert.Equal(t, itoa(int(tc.e.Attempts)), got[2])
			out := got[3]
			require.True(t, strings.HasPrefix(out, tc.prefix))
			back, err := DecodeEnvelope([]byte(out[len(tc.prefix):]))
			require.NoError(t, err)
			want := tc.e
			want.Attempts++
			assert.Equal(t, want, back, "with_attempts changes the attempts and nothing else")
		})
	}
}

func itoa(n int) string { return fmtInt(int64(n)) }

// The protocol's values are named once, in protocol.go: no script spells
// one out, so changing one there changes every script.
func TestScriptsSpellNoProtocolValue(t *testing.T) {
	files, err := filepath.Glob("lua/*.lua")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	incs, err := filepath.Glob("lua/inc/*.lua")
	require.NoError(t, err)
	require.NotEmpty(t, incs)
	files = append(files, incs...)
	values := []string{wakeMember, schedMarker, pauseMember, failRetry, failDead, failBury, deadRequeue, deadPurge, replyPaused, replyLimited, modeTop, modeClaim, modeSharded, modeFilled, dueMember, argYes}
	quoted := regexp.MustCompile(`'([^']*)'|"([^"]*)"`)
	kindLiteral := regexp.MustCompile(`kind [=~]= [0-9]`)
	defines := regexp.MustCompile(`^local (ENV_[A-Z]+|SEQ_LEN|CHUNK|KIND_[A-Z]+|YES|WAKE|SCHED|PAUSE|FAIL_[A-Z]+|DEAD_[A-Z]+|REPLY_[A-Z]+|MODE_[A-Z]+|TAKE_FIRST|MAX_SEQ) =`)
	for _, f := range files {
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		for i, line := range strings.Split(string(src), "\n") {
			code, _, _ := strings.Cut(line, "--")
			where := f + ":" + itoa(i+1) + ": " + strings.TrimSpace(line)
			assert.False(t, defines.MatchString(code), "defines a protocol constant itself: %s", where)
			assert.False(t, kindLiteral.MatchString(code), "compares kind with a number, not KIND_*: %s", where)
			for _, m := range quoted.FindAllStringSubmatch(code, -1) {
				lit := m[1] + m[2]
				for _, v := range values {
					assert.NotEqual(t, v, lit, "spells out a protocol value: %s", where)
				}
			}
		}
	}
	// And the generated constants are what the Go side names.
	pre := luaConstants()
	for _, want := range []string{
		"local ENV_ATTEMPTS = " + itoa(envOffAttempt+1) + "\n",
		"local ENV_ID = " + itoa(envHeaderLen+1) + "\n",
		"local SEQ_LEN = " + itoa(seqLen) + "\n",
		"local WAKE = '" + wakeMember + "'\n",
	} {
		assert.Contains(t, pre, want)
	}
}

// leaseMs rounds up to the millisecond: a lease or delay is never shorter
// than asked.
func TestLeaseMs(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int64
	}{
		{-time.Second, 0},
		{0, 0},
		{time.Nanosecond, 1},
		{time.Millisecond - time.Nanosecond, 1},
		{time.Millisecond, 1},
		{time.Millisecond + time.Nanosecond, 2},
		{1500 * time.Millisecond, 1500},
		{time.Hour, 3600000},
	} {
		assert.Equal(t, tc.want, leaseMs(tc.d), tc.d.String())
	}
	assert.Equal(t, "-42", fmtInt(-42))
}

func TestCeilMs(t *testing.T) {
	base := time.UnixMilli(1000)
	assert.Equal(t, int64(1000), ceilMs(base))
	assert.Equal(t, int64(1001), ceilMs(base.Add(time.Nanosecond)))
	assert.Equal(t, int64(1001), ceilMs(base.Add(time.Millisecond-time.Nanosecond)))
	assert.Equal(t, int64(1001), ceilMs(base.Add(time.Millisecond)))
	assert.Equal(t, int64(0), ceilMs(time.UnixMilli(0)))
	assert.Equal(t, int64(-5), ceilMs(time.UnixMilli(-5).Add(-time.Nanosecond)), "before 1970 too")
}
