package store

import (
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"
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

// without_header (lua/inc/headers.lua) takes the start-by header out of
// every envelope form as Encode would have written the message without it.
func TestWithoutHeaderMatchesEncode(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	es := radix.NewEvalScript(scriptText("-- include: headers\nreturn without_header(ARGV[1], ARGV[2])"))
	long := strings.Repeat("v", 300) // a two-byte uvarint
	for i, tc := range []struct{ in, want Envelope }{
		{Envelope{ID: "a", Payload: []byte("p"), Headers: map[string]string{StartByHeader: "1"}},
			Envelope{ID: "a", Payload: []byte("p")}},
		{Envelope{ID: "a", Payload: []byte("p"), Headers: map[string]string{StartByHeader: "1", "z": long, "a": "x"}},
			Envelope{ID: "a", Payload: []byte("p"), Headers: map[string]string{"z": long, "a": "x"}}},
		{Envelope{ID: "a", Group: "g", CallerID: true, Payload: []byte("p"), Headers: map[string]string{StartByHeader: "1"}},
			Envelope{ID: "a", Group: "g", CallerID: true, Payload: []byte("p")}},
		{Envelope{ID: "a", Group: "g", Payload: []byte("p"), Headers: map[string]string{StartByHeader: "1", "k": "v"}},
			Envelope{ID: "a", Group: "g", Payload: []byte("p"), Headers: map[string]string{"k": "v"}}},
		{Envelope{ID: "a", Payload: []byte("p"), Headers: map[string]string{"k": "v"}},
			Envelope{ID: "a", Payload: []byte("p"), Headers: map[string]string{"k": "v"}}},
		{Envelope{ID: "a", Group: "g", Payload: []byte("p")}, Envelope{ID: "a", Group: "g", Payload: []byte("p")}},
		{Envelope{ID: "a", Payload: []byte("p")}, Envelope{ID: "a", Payload: []byte("p")}},
	} {
		var got []byte
		if err := sharedClient.Do(ctx, es.Cmd(&got, nil, string(tc.in.Encode()), StartByHeader)); err != nil {
			t.Fatal(err)
		}
		if want := tc.want.Encode(); string(got) != string(want) {
			t.Errorf("case %d: got %x, want %x", i, got, want)
		}
	}
	// Damaged headers: unchanged.
	be := Envelope{ID: "a", Payload: []byte("p"), Headers: map[string]string{StartByHeader: "1"}}
	bad := be.Encode()
	bad = bad[:len(bad)-3]
	var got []byte
	if err := sharedClient.Do(ctx, es.Cmd(&got, nil, string(bad), StartByHeader)); err != nil || string(got) != string(bad) {
		t.Fatalf("damaged: %x, %v", got, err)
	}
}
