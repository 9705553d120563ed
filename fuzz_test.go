package prioq

import (
	"bytes"
	"strconv"
	"testing"
)

func FuzzEnvelopeDecode(f *testing.F) {
	good := (&envelope{ID: "abc", CallerID: true, Priority: -7, EnqueuedMs: 1700000000000, Attempts: 3, Payload: []byte("hello")}).encode()
	f.Add(good)
	f.Add(good[:envHeaderLen])
	f.Add([]byte{})
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 255})
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := decodeEnvelope(b)
		if err != nil {
			return
		}
		// Whatever decodes must encode back to the same bytes.
		if again := e.encode(); !bytes.Equal(again, b) {
			t.Fatalf("round trip changed %x into %x", b, again)
		}
	})
}

func FuzzEnvelopeRoundTrip(f *testing.F) {
	f.Add("id", false, int64(0), int64(0), uint32(0), []byte("p"))
	f.Add("01hx-é", true, int64(-1<<63), int64(1<<62), uint32(1<<31), []byte{0})
	f.Fuzz(func(t *testing.T, id string, caller bool, prio, ms int64, attempts uint32, payload []byte) {
		if validateID(id) != nil || len(payload) == 0 {
			t.Skip()
		}
		in := envelope{ID: id, CallerID: caller, Priority: prio, EnqueuedMs: ms, Attempts: attempts, Payload: payload}
		out, err := decodeEnvelope(in.encode())
		if err != nil {
			t.Fatal(err)
		}
		if out.ID != in.ID || out.CallerID != in.CallerID || out.Priority != in.Priority ||
			out.EnqueuedMs != in.EnqueuedMs || out.Attempts != in.Attempts || !bytes.Equal(out.Payload, in.Payload) {
			t.Fatalf("%+v decoded as %+v", in, out)
		}
	})
}

// FuzzScoreRoundTrip checks that every priority a Range accepts survives the
// trip through a sorted-set score (as Redis prints it back) unchanged, and
// that segments are monotonic: a higher priority never lands in a lower segment.
func FuzzScoreRoundTrip(f *testing.F) {
	f.Add(int64(0), int64(1), int64(-MaxRangePriority), int64(MaxRangePriority), 64)
	f.Add(int64(MaxRangePriority), int64(MaxRangePriority-1), int64(-5), int64(MaxRangePriority), 3)
	f.Fuzz(func(t *testing.T, p1, p2, lo, hi int64, segs int) {
		l := Range(lo, hi, segs)
		if l.validate() != nil {
			t.Skip()
		}
		for _, p := range []int64{p1, p2} {
			if p < lo || p > hi {
				continue
			}
			// Redis stores the score as a double and prints it with %.17g.
			f64, err := strconv.ParseFloat(scoreOf(p), 64)
			if err != nil {
				t.Fatal(err)
			}
			back, err := priorityOfScore(strconv.FormatFloat(f64, 'g', 17, 64))
			if err != nil || back != p {
				t.Fatalf("priority %d came back as %d (%v)", p, back, err)
			}
		}
		if p1 < lo || p1 > hi || p2 < lo || p2 > hi {
			return
		}
		s1, err1 := l.segmentOf(p1)
		s2, err2 := l.segmentOf(p2)
		if err1 != nil || err2 != nil || s1 < 0 || s2 < 0 || s1 >= segs || s2 >= segs {
			t.Fatalf("segments %d %d (%v %v) for %v", s1, s2, err1, err2, l)
		}
		if (p1 < p2 && s1 > s2) || (p1 > p2 && s1 < s2) {
			t.Fatalf("not monotonic: %d->%d, %d->%d in %v", p1, s1, p2, s2, l)
		}
	})
}
