package cron

import (
	"errors"
	"testing"
	"time"
)

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestNext(t *testing.T) {
	for _, tc := range []struct {
		name, spec, from string
		want             []string // the next ticks, in order
	}{
		{"every minute", "* * * * *", "2026-01-01T10:00:30Z", []string{"2026-01-01T10:01:00Z", "2026-01-01T10:02:00Z"}},
		{"strictly after", "0 * * * *", "2026-01-01T10:00:00Z", []string{"2026-01-01T11:00:00Z"}},
		{"seconds field", "*/15 * * * * *", "2026-01-01T10:00:50Z", []string{"2026-01-01T10:01:00Z", "2026-01-01T10:01:15Z"}},
		{"list and range", "0 9-10,17 * * MON-FRI", "2026-01-02T16:00:00Z", // a Friday
			[]string{"2026-01-02T17:00:00Z", "2026-01-05T09:00:00Z", "2026-01-05T10:00:00Z"}},
		{"dom or dow", "0 0 13 * FRI", "2026-02-01T00:00:00Z", // Feb 6 is a Friday, the 13th a Friday too
			[]string{"2026-02-06T00:00:00Z", "2026-02-13T00:00:00Z", "2026-02-20T00:00:00Z"}},
		{"sunday as 7", "0 0 * * 7", "2026-01-01T00:00:00Z", []string{"2026-01-04T00:00:00Z"}},
		{"month names", "0 0 1 jan,jul *", "2026-02-01T00:00:00Z", []string{"2026-07-01T00:00:00Z", "2027-01-01T00:00:00Z"}},
		{"leap day", "0 0 29 2 *", "2026-01-01T00:00:00Z", []string{"2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z"}},
		{"step from a value", "5/20 * * * *", "2026-01-01T10:00:00Z", []string{"2026-01-01T10:05:00Z", "2026-01-01T10:25:00Z", "2026-01-01T10:45:00Z", "2026-01-01T11:05:00Z"}},
		{"hourly", "@hourly", "2026-01-01T10:59:59Z", []string{"2026-01-01T11:00:00Z"}},
		{"daily", "@daily", "2026-01-01T10:00:00Z", []string{"2026-01-02T00:00:00Z"}},
		{"weekly", "@weekly", "2026-01-01T10:00:00Z", []string{"2026-01-04T00:00:00Z"}},
		{"every", "@every 100ms", "2026-01-01T10:00:00.05Z", []string{"2026-01-01T10:00:00.1Z", "2026-01-01T10:00:00.2Z"}},
		{"every on a multiple", "@every 1m", "2026-01-01T10:00:00Z", []string{"2026-01-01T10:01:00Z"}},
		{"zone", "CRON_TZ=Asia/Tokyo 0 9 * * *", "2026-01-01T00:00:00Z", []string{"2026-01-02T00:00:00Z"}},
		// Europe/Paris springs forward on 2026-03-29 at 02:00 CET (01:00
		// UTC) to 03:00 CEST: 02:30 does not happen; it fires at the jump.
		{"spring forward", "CRON_TZ=Europe/Paris 30 2 * * *", "2026-03-28T00:00:00Z",
			[]string{"2026-03-28T01:30:00Z", "2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"}},
		// Skipped wall times are one tick at the jump, then 03:00 (the jump
		// too) does not fire again.
		{"spring forward, every 15 min", "CRON_TZ=Europe/Paris */15 * * * *", "2026-03-29T00:50:00Z",
			[]string{"2026-03-29T01:00:00Z", "2026-03-29T01:15:00Z"}},
		// Falls back on 2026-10-25 at 03:00 CEST (01:00 UTC) to 02:00 CET:
		// 02:30 happens twice and fires at the first only.
		{"fall back", "CRON_TZ=Europe/Paris 30 2 * * *", "2026-10-24T12:00:00Z",
			[]string{"2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"}},
		{"fall back, hourly", "CRON_TZ=Europe/Paris 0 * * * *", "2026-10-24T23:30:00Z",
			[]string{"2026-10-25T00:00:00Z", "2026-10-25T02:00:00Z", "2026-10-25T03:00:00Z"}},
		{"America/New_York spring forward", "TZ=America/New_York 30 2 * * *", "2026-03-07T12:00:00Z",
			[]string{"2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Parse(tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			at := mustTime(t, tc.from)
			for _, w := range tc.want {
				at = s.Next(at)
				if want := mustTime(t, w); !at.Equal(want) {
					t.Fatalf("next: %v, want %v", at.UTC(), want)
				}
			}
		})
	}
}

func TestParseRefuses(t *testing.T) {
	for _, spec := range []string{
		"", "* * * *", "* * * * * * *", "60 * * * *", "* 24 * * *", "* * 0 * *", "* * 32 * *",
		"* * * 13 *", "* * * * 8", "*/0 * * * *", "5-1 * * * *", "a * * * *", "* * * FOO *",
		"0 0 30 2 *", "@every", "@every 0s", "@every -1s", "@every 1500us", "@every x",
		"@often", "CRON_TZ=Nowhere/City * * * * *", "CRON_TZ= * * * * *", "1,,2 * * * *",
	} {
		if _, err := Parse(spec); !errors.Is(err, ErrSpec) {
			t.Errorf("Parse(%q): %v, want ErrSpec", spec, err)
		}
	}
}
