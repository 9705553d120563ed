// Package fanout runs work over many items a bounded number at a time: the
// shape of opening or reading thousands of queues (a MultiConsumer opening
// its queues, `prioq queues`, the dashboard's list, the tests and the bench
// that make 10,000 queues).
package fanout

import "sync"

// Each calls f(i) for every i in [0, n), at most workers at a time, and
// returns when every call has.
func Each(n, workers int, f func(i int)) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, max(workers, 1))
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			f(i)
		}()
	}
	wg.Wait()
}
