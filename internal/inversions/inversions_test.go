package inversions

import (
	"testing"
	"time"

	"github.com/prioq/prioq/internal/testkit/assert"
)

func TestCount(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	const w = 10 * time.Millisecond
	for _, tc := range []struct {
		name string
		recs []Delivery
		want int
	}{
		{"none", nil, 0},
		{"in order", []Delivery{{2, at(0), at(1)}, {1, at(0), at(2)}, {0, at(0), at(3)}}, 0},
		{"a higher one ready 20 ms, taken after", []Delivery{{1, at(0), at(30)}, {0, at(5), at(20)}}, 1},
		{"a higher one ready only 5 ms", []Delivery{{1, at(0), at(30)}, {0, at(5), at(5)}}, 0},
		{"the higher one already taken", []Delivery{{1, at(0), at(12)}, {0, at(5), at(20)}}, 0},
		{"equal priorities never count", []Delivery{{1, at(0), at(30)}, {1, at(5), at(20)}}, 0},
		{"counted once however many wait", []Delivery{{2, at(0), at(50)}, {1, at(0), at(51)}, {0, at(1), at(40)}}, 1},
		{"each late lower delivery counts", []Delivery{{3, at(0), at(50)}, {0, at(1), at(20)}, {1, at(2), at(30)}}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, Count(tc.recs, w))
		})
	}
}
