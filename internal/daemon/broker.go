package daemon

import (
	"sync"

	"github.com/gpusched/gpusched/pkg/api"
)

// subscriberBuffer bounds how far a subscriber may fall behind before its
// stream is ended (it must resubscribe) rather than slowing the daemon.
const subscriberBuffer = 1024

// broker fans events out to subscribers without ever blocking a publisher.
type broker struct {
	mu   sync.Mutex
	subs map[*subscription]struct{}
}

type subscription struct {
	ch     chan api.Event
	filter func(*api.Event) bool
	// overflowed is set (under broker.mu) before ch is closed for falling behind.
	overflowed bool
}

func newBroker() *broker { return &broker{subs: map[*subscription]struct{}{}} }

// subscribe registers a filtered subscription; call cancel when done.
func (b *broker) subscribe(filter func(*api.Event) bool) (*subscription, func()) {
	s := &subscription{ch: make(chan api.Event, subscriberBuffer), filter: filter}
	b.mu.Lock()
	b.subs[s] = struct{}{}
	b.mu.Unlock()
	return s, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if _, ok := b.subs[s]; ok {
			delete(b.subs, s)
			close(s.ch)
		}
	}
}

// publish delivers e, its command cut (listedEvent), to every interested
// subscriber; one that is full is dropped and its channel closed.
func (b *broker) publish(e api.Event) {
	e = listedEvent(e)
	b.mu.Lock()
	defer b.mu.Unlock()
	for s := range b.subs {
		if s.filter != nil && !s.filter(&e) {
			continue
		}
		select {
		case s.ch <- e:
		default:
			s.overflowed = true
			delete(b.subs, s)
			close(s.ch)
		}
	}
}

// fellBehind reports whether s was closed for overflowing.
func (b *broker) fellBehind(s *subscription) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return s.overflowed
}
