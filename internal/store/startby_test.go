package store

import (
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The start-by time's edge, exactly: a message taken at its start-by
// millisecond (the take's server time, from its token) is handed out; one
// taken a millisecond after it goes to the dead letters.
func TestLateOnesAtTheEdge(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	s := NewShards(sharedClient, "startby-edge-"+RandomID(), &Config{Layout: Levels(2), Mode: AtLeastOnce, MaxAttempts: 10,
		PromoteBatch: 256, CallTimeout: 5 * time.Second, WaitTimeout: time.Second, Shards: 1, Logger: slog.Default()})[0]
	for i := range 2 {
		e := Envelope{ID: "m" + strconv.Itoa(i), Priority: 0, EnqueuedMs: time.Now().UnixMilli(), Payload: []byte("x"),
			Headers: map[string]string{StartByHeader: "99999999999999"}}
		if _, err := s.Send(ctx, []Item{{ID: e.ID, Lane: 0, Env: e.Encode()}}); err != nil {
			t.Fatal(err)
		}
	}
	r, err := s.Take(ctx, TakeArgs{Lanes: s.Keys().HighFirst(), N: 2, Lease: time.Minute})
	if err != nil || len(r.Deliveries) != 2 {
		t.Fatalf("take: %v, %d", err, len(r.Deliveries))
	}
	at, ok := tokenMs(r.Deliveries[0].Token())
	if !ok {
		t.Fatalf("token %q", r.Deliveries[0].Token())
	}
	r.Deliveries[0].Headers = map[string]string{StartByHeader: strconv.FormatInt(at, 10)}   // taken at it
	r.Deliveries[1].Headers = map[string]string{StartByHeader: strconv.FormatInt(at-1, 10)} // taken 1 ms after
	kept, dropped := s.lateOnes(ctx, r.Deliveries)
	if len(kept) != 1 || kept[0].ID != "m0" || len(dropped) != 0 {
		t.Fatalf("kept %v, dropped %v", kept, dropped)
	}
	dead, err := s.DeadLetters(ctx, 0, 10)
	if err != nil || len(dead) != 1 || dead[0].ID != "m1" || !strings.HasPrefix(dead[0].Reason, ReasonTooLate) {
		t.Fatalf("dead letters: %+v, %v", dead, err)
	}
}
