package consume

import (
	"testing"
	"time"
)

// A promoter promotes once as it starts (due work may be waiting), and
// signals each promotion.
func TestPromoterSignalsItsFirstPromotion(t *testing.T) {
	promoted := make(chan struct{}, 1)
	p := &Promoter{S: newShard(t), Opts: PromoterOptions{Wait: time.Second, Promoted: promoted},
		Report: func(err error) { t.Errorf("reported: %v", err) }}
	run(t, p.Run)
	waitSignal(t, promoted, 5*time.Second, "promotion")
}
