package consume

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prioq/prioq/internal/store"
)

// listener is a MultiConsumer's one connection to one node: subscribed
// (SSUBSCRIBE) to the channel of every served shard on that node, it hands
// announcements to the multi. It holds one connection of the node's pool for
// as long as the consumer runs, and always gives it back closed (store.Listen):
// a subscribed connection must not serve other calls.
type listener struct {
	host listenerHost
	o    listenerOptions
	node string

	mu      sync.Mutex
	key     string          // a key on the node: how to get a connection of its pool
	want    map[string]bool // channels it should be subscribed to
	changed chan struct{}   // want changed

	// Channels the node refused (NOPERM: the user lacks the channel, or
	// SSUBSCRIBE itself): left out, their shards served by the probe alone,
	// until retryAt, when one of them is tried again; if it passes, all are.
	refused map[string]bool
	retryAt time.Time
}

// listenRead is how long one read waits before the listener looks at its
// subscriptions again; listenPing how often an idle connection is checked;
// refusedRetry how often a refused subscription is tried again (one channel
// each time, so that 10,000 refused queues cost one command a minute).
const (
	listenRead   = 200 * time.Millisecond
	listenPing   = 10 * time.Second
	refusedRetry = time.Minute
)

// listenerHost is what a listener tells its Multi.
type listenerHost interface {
	// announced handles an announcement what on channel ch.
	announced(ch, what string)
	// refusedChannel reports that the node refused to subscribe to ch.
	refusedChannel(ch string, err error)
	// resync finds where the shards live now, after a failure.
	resync(ctx context.Context)
	// probeChannels probes the shards of channels just subscribed.
	probeChannels(chans []string)
}

// listenerOptions are what a listener needs of its consumer.
type listenerOptions struct {
	c             store.Client
	callTimeout   time.Duration
	retryInterval time.Duration
	holding       func(node string) (done func()) // counts its connection as in use
	bg            context.Context                 // the consumer's: ends on Close
	report        func(error)
}

func newListener(node string, host listenerHost, o listenerOptions) *listener {
	return &listener{host: host, o: o, node: node, want: map[string]bool{}, refused: map[string]bool{}, changed: make(chan struct{}, 1)}
}

// errListenerDone ends a listener's connection at the consumer's end.
var errListenerDone = errors.New("prioq: listener done")

// errListenerIdle: every channel of the node was unsubscribed; the
// connection goes back (closed) until one is wanted again.
var errListenerIdle = errors.New("prioq: listener idle")

// errAllRefused: the node refused every channel wanted; the connection goes
// back (closed) until one is tried again (retryAt) or the channels change.
var errAllRefused = errors.New("prioq: every subscription refused")

// errSlotMoved: the node dropped a subscription by itself, or refused one
// (MOVED), because the channel's slot moved to another node.
var errSlotMoved = store.ErrSlotMoved

func (l *listener) subscribe(ch string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.key == "" {
		l.key = ch
	}
	l.want[ch] = true
	l.poke()
}

func (l *listener) unsubscribe(ch string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.want, ch)
	delete(l.refused, ch)
	if l.key == ch {
		// It routed the connection: a channel it still wants routes it to
		// the same node (and none: the listener idles).
		l.key = ""
		for k := range l.want {
			l.key = k
			break
		}
	}
	l.poke()
}

func (l *listener) poke() {
	select {
	case l.changed <- struct{}{}:
	default:
	}
}

// run keeps the listener connected until ctx ends; after a failure, it waits
// RetryInterval, finds where the shards live now, and connects again.
func (l *listener) run(ctx context.Context) {
	for ctx.Err() == nil {
		l.mu.Lock()
		key := l.key
		l.mu.Unlock()
		if key == "" { // nothing to listen to on this node (any more)
			select {
			case <-ctx.Done():
				return
			case <-l.changed:
			}
			continue
		}
		// The connection goes back to the pool closed, whatever serve
		// returns (store's Listen): a subscribed connection must not serve
		// other calls.
		err := store.Listen(ctx, l.o.c, key, l.o.callTimeout, l.host.announced, l.serve)
		if ctx.Err() != nil {
			return
		}
		switch {
		case errors.Is(err, errListenerIdle):
			continue
		case errors.Is(err, errAllRefused):
			// Nothing to hold a connection for: wait for new channels
			// or the time to try a refused one again.
			l.mu.Lock()
			wait := time.Until(l.retryAt)
			l.mu.Unlock()
			t := time.NewTimer(max(wait, 0))
			select {
			case <-ctx.Done():
			case <-l.changed:
			case <-t.C:
			}
			t.Stop()
			continue
		case !errors.Is(err, errSlotMoved):
			l.o.report(fmt.Errorf("prioq: multi consumer: listening on %q: %w", l.node, err))
		}
		if !sleepCtx(ctx, l.o.retryInterval) {
			return
		}
		l.host.resync(ctx)
	}
}

// serve is one connection's life: subscribe to every wanted channel, probe
// (what was announced before the subscription is found that way), then read
// announcements and follow changes of what is wanted. Its connection is
// closed after it, whatever it returns (store.Listen).
func (l *listener) serve(ctx context.Context, sub *store.Subscription) error {
	defer l.o.holding(l.node)()
	have := map[string]bool{}
	// subscribe sends SSUBSCRIBE ch: false (and no error) when the node
	// refused it for the user's permissions.
	subscribe := func(ch string) (bool, error) {
		err := sub.Subscribe(ctx, ch) // MOVED: errSlotMoved, not this node's any more
		switch {
		case err == nil:
			have[ch] = true
			return true, nil
		case store.IsNoPerm(err):
			l.host.refusedChannel(ch, err)
			return false, nil
		}
		return false, err
	}
	sync := func() error {
		l.mu.Lock()
		var retry string
		if len(l.refused) > 0 && !time.Now().Before(l.retryAt) {
			for ch := range l.refused {
				retry = ch
				break
			}
		}
		l.mu.Unlock()
		if retry != "" {
			// One refused channel tried again: if the user may now
			// subscribe, every refused one is.
			ok, err := subscribe(retry)
			if err != nil {
				return err
			}
			l.mu.Lock()
			if ok {
				clear(l.refused)
			} else {
				l.refused[retry] = true
				l.retryAt = time.Now().Add(refusedRetry)
			}
			l.mu.Unlock()
		}
		l.mu.Lock()
		var add, drop []string
		for ch := range l.want {
			if !have[ch] && !l.refused[ch] {
				add = append(add, ch)
			}
		}
		for ch := range have {
			if !l.want[ch] {
				drop = append(drop, ch)
			}
		}
		l.mu.Unlock()
		var refused []string
		for _, ch := range add {
			ok, err := subscribe(ch)
			if err != nil {
				return err
			}
			if !ok {
				refused = append(refused, ch)
			}
		}
		if len(refused) > 0 {
			l.mu.Lock()
			for _, ch := range refused {
				if l.want[ch] {
					l.refused[ch] = true
				}
			}
			if !l.retryAt.After(time.Now()) {
				l.retryAt = time.Now().Add(refusedRetry)
			}
			l.mu.Unlock()
		}
		for _, ch := range drop {
			if err := sub.Unsubscribe(ctx, ch); err != nil {
				return err
			}
			delete(have, ch)
		}
		if len(add) > 0 {
			// Refused ones too: what waits there is found now, not at
			// the next probe round.
			go l.host.probeChannels(add)
		}
		if len(have) == 0 {
			l.mu.Lock()
			wanted := len(l.want) > 0
			l.mu.Unlock()
			if wanted {
				return errAllRefused
			}
			return errListenerIdle
		}
		return nil
	}
	if err := sync(); err != nil {
		return err
	}
	heard := time.Now() // the last message or PING reply
	for {
		select {
		case <-ctx.Done():
			return errListenerDone
		case <-l.changed:
			if err := sync(); err != nil {
				return err
			}
		default:
			l.mu.Lock()
			retry := len(l.refused) > 0 && !time.Now().Before(l.retryAt)
			l.mu.Unlock()
			if retry {
				if err := sync(); err != nil {
					return err
				}
			}
		}
		if l.o.bg.Err() != nil {
			return errListenerDone
		}
		rctx, cancel := context.WithTimeout(ctx, listenRead)
		err := sub.Read(rctx) // an announcement goes to multi.announced
		cancel()
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			if time.Since(heard) > listenPing {
				// A connection that died silently fails the PING
				// (within CallTimeout).
				if err := sub.Ping(ctx); err != nil {
					return err
				}
				heard = time.Now()
			}
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return errListenerDone
			}
			return err
		}
		heard = time.Now()
	}
}
