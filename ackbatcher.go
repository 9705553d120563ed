package prioq

import (
	"context"
)

// ackBatcher sends the acks that are ready together in one round trip: the
// first ack waits for no timer, later ones queue behind the round trip in
// progress and go in the next. Under load batches grow by themselves.
type ackBatcher struct {
	c    *Consumer
	reqs chan ackReq
	done chan struct{}
}

type ackReq struct {
	m   *Message
	err chan error
}

const maxAckBatch = 256

func newAckBatcher(c *Consumer) *ackBatcher {
	a := &ackBatcher{c: c, reqs: make(chan ackReq, maxAckBatch), done: make(chan struct{})}
	go a.loop()
	return a
}

func (a *ackBatcher) ack(ctx context.Context, m *Message) error {
	r := ackReq{m: m, err: make(chan error, 1)}
	select {
	case a.reqs <- r:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-r.err:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (a *ackBatcher) loop() {
	defer close(a.done)
	batch := make([]ackReq, 0, maxAckBatch)
	for r := range a.reqs {
		batch = append(batch[:0], r)
	drain:
		for len(batch) < maxAckBatch {
			select {
			case r, ok := <-a.reqs:
				if !ok {
					break drain
				}
				batch = append(batch, r)
			default:
				break drain
			}
		}
		msgs := make([]*Message, len(batch))
		for i, r := range batch {
			msgs[i] = r.m
		}
		ctx, cancel := context.WithTimeout(context.Background(), a.c.q.cfg.CallTimeout)
		errs := a.c.q.ack(ctx, msgs)
		cancel()
		for i, r := range batch {
			r.err <- errs[i]
		}
	}
}

// close is called after every handler returned, so no ack is sent after it.
func (a *ackBatcher) close() {
	close(a.reqs)
	<-a.done
}
