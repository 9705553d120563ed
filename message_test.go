package prioq

import (
	"testing"
	"time"

	"github.com/prioq/prioq/internal/store"
	"github.com/prioq/prioq/internal/testkit/assert"
)

func TestNewMessageAndInfo(t *testing.T) {
	e := store.Envelope{ID: "job-1", CallerID: true, Priority: -3, EnqueuedMs: 1700000000123, Attempts: 4, Payload: []byte("p")}
	m := newMessage(&store.Delivery{Envelope: e})
	assert.Equal(t, "job-1", m.ID)
	assert.Equal(t, int64(-3), m.Priority)
	assert.Equal(t, []byte("p"), m.Payload)
	assert.Equal(t, 4, m.Attempts)
	assert.Equal(t, int64(1700000000123), m.EnqueuedAt.UnixMilli())
	assert.True(t, m.d.CallerID)
	assert.True(t, m.LeaseDeadline().IsZero(), "no lease before a take sets one")

	info := MessageInfo(store.InfoOf(e))
	assert.Equal(t, MessageInfo{ID: "job-1", Priority: -3, Payload: []byte("p"), Attempts: 4,
		EnqueuedAt: time.UnixMilli(1700000000123)}, info)
}
