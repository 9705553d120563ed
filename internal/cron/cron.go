// Package cron parses the specs of schedules (prioq's Queue.Schedule) and
// computes their fire times. Pure code: no Redis, no clock of its own; the
// caller passes the server's now.
//
// A spec is one of:
//
//	m h dom mon dow          5 fields, minute resolution (second 0)
//	s m h dom mon dow        6 fields, the first the second
//	@every d                 every d (a Go duration, ≥ 1ms, whole ms), at the
//	                         multiples of d since the Unix epoch, so every
//	                         process finds the same ticks
//	@yearly @annually @monthly @weekly @daily @midnight @hourly
//
// optionally after "CRON_TZ=Zone " (or "TZ=Zone "): the fields are read in
// that IANA zone, otherwise in UTC. Fields take *, numbers, ranges a-b, steps
// */n and a-b/n, lists of these separated by commas, and names for months
// (JAN..DEC) and days of week (SUN..SAT; 0 and 7 are Sunday). As in Vixie
// cron, when both the day of month and the day of week are restricted (not
// *), a day matching either fires.
//
// Daylight saving: a wall time that a zone skips (spring forward) fires at
// the instant the clocks jump; several skipped wall times are one tick
// there. A wall time that happens twice (fall back) fires at its first
// occurrence only. Ticks are thus strictly increasing instants.
package cron

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ErrSpec is the error of a spec that does not parse (wrapped with the why).
var ErrSpec = errors.New("invalid schedule spec")

// Spec is a parsed schedule.
type Spec struct {
	every time.Duration // @every: > 0, and the fields below are unused
	loc   *time.Location
	// Allowed values of each field, as bit sets.
	sec, min, hour, dom, mon, dow uint64
	domStar, dowStar              bool
}

// maxYears bounds the search for the next tick: a spec with none within it
// (Feb 30) is refused by Parse.
const maxYears = 30

// Parse parses spec.
func Parse(spec string) (*Spec, error) {
	s, err := parse(strings.TrimSpace(spec))
	if err != nil {
		return nil, fmt.Errorf("%w %q: %v", ErrSpec, spec, err)
	}
	if s.every == 0 {
		if s.Next(time.Unix(0, 0)).IsZero() {
			return nil, fmt.Errorf("%w %q: it never fires", ErrSpec, spec)
		}
	}
	return s, nil
}

func parse(spec string) (*Spec, error) {
	s := &Spec{loc: time.UTC}
	for _, p := range []string{"CRON_TZ=", "TZ="} {
		if rest, ok := strings.CutPrefix(spec, p); ok {
			zone, tail, _ := strings.Cut(rest, " ")
			loc, err := time.LoadLocation(zone)
			if err != nil || zone == "" {
				return nil, fmt.Errorf("unknown time zone %q", zone)
			}
			s.loc, spec = loc, strings.TrimSpace(tail)
			break
		}
	}
	if rest, ok := strings.CutPrefix(spec, "@every"); ok {
		d, err := time.ParseDuration(strings.TrimSpace(rest))
		switch {
		case err != nil:
			return nil, err
		case d < time.Millisecond || d%time.Millisecond != 0:
			return nil, fmt.Errorf("@every %v: want at least 1ms, a whole number of ms", d)
		}
		s.every = d
		return s, nil
	}
	if d, ok := descriptors[spec]; ok {
		spec = d
	}
	fields := strings.Fields(spec)
	switch len(fields) {
	case 5:
		fields = append([]string{"0"}, fields...)
	case 6:
	default:
		return nil, fmt.Errorf("want 5 or 6 fields, or @every, or a descriptor, got %d fields", len(fields))
	}
	var err error
	set := func(dst *uint64, f string, lo, hi int, names []string) {
		if err == nil {
			*dst, err = field(f, lo, hi, names)
		}
	}
	set(&s.sec, fields[0], 0, 59, nil)
	set(&s.min, fields[1], 0, 59, nil)
	set(&s.hour, fields[2], 0, 23, nil)
	set(&s.dom, fields[3], 1, 31, nil)
	set(&s.mon, fields[4], 1, 12, months)
	set(&s.dow, fields[5], 0, 7, days)
	if err != nil {
		return nil, err
	}
	if s.dow&(1<<7) != 0 { // 7 is Sunday too
		s.dow |= 1
	}
	s.domStar = fields[3] == "*" || fields[3] == "?"
	s.dowStar = fields[5] == "*" || fields[5] == "?"
	return s, nil
}

var descriptors = map[string]string{
	"@yearly":   "0 0 0 1 1 *",
	"@annually": "0 0 0 1 1 *",
	"@monthly":  "0 0 0 1 * *",
	"@weekly":   "0 0 0 * * 0",
	"@daily":    "0 0 0 * * *",
	"@midnight": "0 0 0 * * *",
	"@hourly":   "0 0 * * * *",
}

var (
	months = []string{"", "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"}
	days   = []string{"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"}
)

// field parses one field into the bit set of its values in lo..hi.
func field(f string, lo, hi int, names []string) (uint64, error) {
	var bits uint64
	for _, part := range strings.Split(f, ",") {
		rng, stepStr, hasStep := strings.Cut(part, "/")
		step := 1
		if hasStep {
			n, err := strconv.Atoi(stepStr)
			if err != nil || n < 1 || n > hi {
				return 0, fmt.Errorf("field %q: bad step %q", f, stepStr)
			}
			step = n
		}
		var a, b int
		switch {
		case rng == "*" || rng == "?":
			a, b = lo, hi
		default:
			first, last, isRange := strings.Cut(rng, "-")
			var err error
			if a, err = value(first, lo, hi, names); err != nil {
				return 0, fmt.Errorf("field %q: %v", f, err)
			}
			b = a
			if isRange {
				if b, err = value(last, lo, hi, names); err != nil {
					return 0, fmt.Errorf("field %q: %v", f, err)
				}
			} else if hasStep {
				b = hi // a/n: from a to the end
			}
			if b < a {
				return 0, fmt.Errorf("field %q: range %d-%d runs backwards", f, a, b)
			}
		}
		for v := a; v <= b; v += step {
			bits |= 1 << v
		}
	}
	return bits, nil
}

func value(s string, lo, hi int, names []string) (int, error) {
	for i, n := range names {
		if n != "" && strings.EqualFold(s, n) {
			return i, nil
		}
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < lo || v > hi {
		return 0, fmt.Errorf("%q is not in %d..%d", s, lo, hi)
	}
	return v, nil
}

// Every is the interval of an @every spec, 0 for a cron spec.
func (s *Spec) Every() time.Duration { return s.every }

// Next is the first tick strictly after t, or the zero time when there is
// none within 30 years.
func (s *Spec) Next(t time.Time) time.Time {
	if s.every > 0 {
		ms, d := t.UnixMilli(), s.every.Milliseconds()
		return time.UnixMilli((ms/d + 1) * d)
	}
	lt := t.In(s.loc)
	// Calendar days are walked in UTC (no day is 23 or 25 hours there);
	// each day's wall times are placed in the zone by instant.
	day := time.Date(lt.Year(), lt.Month(), lt.Day(), 0, 0, 0, 0, time.UTC)
	end := day.AddDate(maxYears, 0, 0)
	first := true
	for ; day.Before(end); day, first = day.AddDate(0, 0, 1), false {
		if s.mon&(1<<uint(day.Month())) == 0 {
			day = time.Date(day.Year(), day.Month()+1, 0, 0, 0, 0, 0, time.UTC) // its last day; the loop adds one
			continue
		}
		if !s.dayMatches(day) {
			continue
		}
		// On t's own day, wall times before t's are before t: instants grow
		// with wall times (see wallInstant), so they are skipped unread.
		from := 0
		if first {
			from = lt.Hour()*3600 + lt.Minute()*60 + lt.Second()
		}
		if at, ok := s.onDay(day, from, t); ok {
			return at
		}
	}
	return time.Time{}
}

func (s *Spec) dayMatches(day time.Time) bool {
	dom := s.dom&(1<<uint(day.Day())) != 0
	dow := s.dow&(1<<uint(day.Weekday())) != 0
	if s.domStar || s.dowStar {
		return dom && dow
	}
	return dom || dow
}

// onDay is the first tick of day after t, its wall times from second `from`
// of the day on.
func (s *Spec) onDay(day time.Time, from int, t time.Time) (time.Time, bool) {
	for h := from / 3600; h < 24; h++ {
		if s.hour&(1<<uint(h)) == 0 {
			continue
		}
		for m := 0; m < 60; m++ {
			if s.min&(1<<uint(m)) == 0 || h*3600+m*60+59 < from {
				continue
			}
			for sec := 0; sec < 60; sec++ {
				if s.sec&(1<<uint(sec)) == 0 || h*3600+m*60+sec < from {
					continue
				}
				if at := wallInstant(day, h, m, sec, s.loc); at.After(t) {
					return at, true
				}
			}
		}
	}
	return time.Time{}, false
}

// wallInstant is the instant of wall time h:m:s on day in loc: its first
// occurrence when the wall time happens twice, the instant the clocks jump
// when they skip it.
func wallInstant(day time.Time, h, m, s int, loc *time.Location) time.Time {
	y, mo, d := day.Date()
	c := time.Date(y, mo, d, h, m, s, 0, loc)
	want := time.Date(y, mo, d, h, m, s, 0, time.UTC)
	shown := func(x time.Time) time.Time {
		x = x.In(loc)
		return time.Date(x.Year(), x.Month(), x.Day(), x.Hour(), x.Minute(), x.Second(), 0, time.UTC)
	}
	if got := shown(c); !got.Equal(want) { // skipped: the jump is at a bound of c's zone period
		start, end := c.ZoneBounds()
		if got.After(want) {
			return start
		}
		return end
	}
	// Happens twice? Then an earlier instant shows the same wall time: it
	// lies one offset change before, across the start of c's zone period.
	if start, _ := c.ZoneBounds(); !start.IsZero() {
		_, before := start.Add(-time.Second).Zone()
		_, now := c.Zone()
		if before > now {
			if e := c.Add(-time.Duration(before-now) * time.Second); e.Before(c) && shown(e).Equal(want) {
				return e
			}
		}
	}
	return c
}
