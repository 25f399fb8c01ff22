package typed

import (
	"container/list"
	"sync"
	"time"
)

// priority orders the keys waiting in a Loop's queue.
type priority uint8

const (
	// syncPriority is for keys from the initial list, a relist or a resync: there can be
	// very many of them at once, and most have not changed.
	syncPriority priority = iota
	// livePriority is for keys of live watch changes, which someone is waiting for.
	livePriority
)

// priorityOf returns the priority of an event's key from the event's Sync.
func priorityOf(sync bool) priority {
	if sync {
		return syncPriority
	}
	return livePriority
}

// liveInARow is how many live keys the queue hands out in a row while sync keys wait
// before it hands out one sync key: live changes go first, yet sync keys get at least
// one reconcile in every liveInARow+1 however busy the cluster is. A bound on a count
// rather than aging by time, so that the order depends on nothing but the events.
const liveInARow = 8

// keyQueue is a Loop's workqueue. It keeps the contract of client-go's workqueue.Typed
// (a key is queued at most once; it is handed to one worker at a time; an Add while the
// key is being processed queues it again once Done) and adds what client-go lacks: two
// priorities, a key queued at sync priority moving to live priority on a live Add, and
// liveInARow against starvation. Within a priority, keys are handed out in the order
// they were queued. Unlike client-go's, Get hands out nothing once ShutDown is called:
// a stopping Loop starts no reconcile.
//
// Memory is proportional to the keys queued or processing, whatever the number of Adds.
type keyQueue struct {
	mu   sync.Mutex
	cond *sync.Cond
	// waiting holds the queued keys of each priority, oldest first.
	waiting [2]list.List
	// dirty holds every key to be reconciled: queued, or being processed and to be queued
	// again once Done.
	dirty map[string]*dirtyKey
	// processing holds the keys handed out and not yet Done.
	processing map[string]struct{}
	// liveRun counts the live keys handed out in a row while sync keys waited.
	liveRun  int
	shutDown bool
	// timed: the queue notes when each key is queued (see GetTimed), for WorkMetrics;
	// no clock is read otherwise.
	timed bool
	// adds counts the keys that became queued (see WorkMetrics.KeysQueued);
	// reportedAdds, guarded by the Loop's depthMu, is the count last reported.
	adds         uint64
	reportedAdds uint64
}

type dirtyKey struct {
	prio priority
	elem *list.Element // in waiting[prio]; nil while the key is being processed or parked
	// parked: the key waits, neither queued nor processing, until Unpark (see Park).
	parked bool
	// queued is when the key was queued, or unparked; set only when the queue is timed.
	queued time.Time
}

// newKeyQueue returns an empty queue; a timed one notes when keys are queued.
func newKeyQueue(timed bool) *keyQueue {
	q := &keyQueue{dirty: map[string]*dirtyKey{}, processing: map[string]struct{}{}, timed: timed}
	q.cond = sync.NewCond(&q.mu)
	return q
}

// Add queues key at priority p, or raises the priority of a key already queued (moving
// it to the back of the live keys) or being processed. A lower priority never lowers a
// key's. Add does nothing once the queue has shut down, and then reports false.
func (q *keyQueue) Add(key string, p priority) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.shutDown {
		return false
	}
	if d, ok := q.dirty[key]; ok {
		if p > d.prio {
			if d.elem != nil {
				q.waiting[d.prio].Remove(d.elem)
				d.elem = q.waiting[p].PushBack(key)
			}
			d.prio = p
		}
		return true
	}
	d := &dirtyKey{prio: p}
	if q.timed {
		d.queued = time.Now()
	}
	q.adds++
	q.dirty[key] = d
	if _, busy := q.processing[key]; !busy {
		d.elem = q.waiting[p].PushBack(key)
		q.cond.Signal()
	}
	return true
}

// Get blocks until a key is queued or the queue shuts down, and hands out the next key
// with its priority; shutdown is true, and nothing is handed out, once ShutDown is
// called. The caller must call Done with the key when it has processed it.
func (q *keyQueue) Get() (key string, p priority, shutdown bool) {
	key, p, _, shutdown = q.GetTimed()
	return key, p, shutdown
}

// GetTimed is Get, which also returns when the key was queued (or unparked); the zero
// time unless the queue is timed.
func (q *keyQueue) GetTimed() (key string, p priority, queued time.Time, shutdown bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for !q.shutDown && q.lenLocked() == 0 {
		q.cond.Wait()
	}
	if q.shutDown {
		return "", 0, time.Time{}, true
	}
	p = q.nextPriorityLocked()
	key = q.waiting[p].Remove(q.waiting[p].Front()).(string)
	queued = q.dirty[key].queued
	delete(q.dirty, key)
	q.processing[key] = struct{}{}
	return key, p, queued, false
}

// nextPriorityLocked picks the list the next key comes from; at least one is not empty.
func (q *keyQueue) nextPriorityLocked() priority {
	live, sync := q.waiting[livePriority].Len(), q.waiting[syncPriority].Len()
	switch {
	case live > 0 && sync == 0:
		q.liveRun = 0 // nothing waits behind live keys
		return livePriority
	case live > 0 && q.liveRun < liveInARow:
		q.liveRun++
		return livePriority
	default:
		q.liveRun = 0
		return syncPriority
	}
}

// Done marks key as processed, queueing it again if it was added meanwhile.
func (q *keyQueue) Done(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.processing, key)
	if d, ok := q.dirty[key]; ok {
		d.elem = q.waiting[d.prio].PushBack(key)
		q.cond.Signal()
	}
}

// Park ends the processing of key, handed out at priority p, without queueing it: it
// waits, holding no worker, until Unpark. Adds meanwhile only raise its priority: a
// parked key is dirty, and is reconciled once when it is unparked.
func (q *keyQueue) Park(key string, p priority) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.processing, key)
	d, ok := q.dirty[key]
	if !ok {
		d = &dirtyKey{prio: p}
		q.dirty[key] = d
	}
	d.prio = max(d.prio, p)
	d.parked = true
}

// Unpark queues a parked key at the front of its priority's keys, since it has already
// waited its turn; it does nothing for a key that is not parked.
func (q *keyQueue) Unpark(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if d, ok := q.dirty[key]; ok && d.parked {
		d.parked = false
		if q.timed {
			d.queued = time.Now()
		}
		d.elem = q.waiting[d.prio].PushFront(key)
		q.cond.Signal()
	}
}

// ShutDown makes Get return shutdown to every caller, now and later, and Add do nothing.
func (q *keyQueue) ShutDown() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.shutDown = true
	q.cond.Broadcast()
}

// Len returns how many keys are queued, not counting those being processed.
func (q *keyQueue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.lenLocked()
}

// LenAndAdds returns Len and how many keys have become queued since the queue was made.
func (q *keyQueue) LenAndAdds() (int, uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.lenLocked(), q.adds
}

func (q *keyQueue) lenLocked() int {
	return q.waiting[syncPriority].Len() + q.waiting[livePriority].Len()
}

// Dirty reports whether key is to be reconciled: queued, or added again while being
// processed.
func (q *keyQueue) Dirty(key string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	_, ok := q.dirty[key]
	return ok
}

// Pending reports whether key is queued, parked or being processed.
func (q *keyQueue) Pending(key string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	_, dirty := q.dirty[key]
	_, busy := q.processing[key]
	return dirty || busy
}

// Keys returns the queued keys, not counting those being processed.
func (q *keyQueue) Keys() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	keys := make([]string, 0, q.lenLocked())
	for i := range q.waiting {
		for e := q.waiting[i].Front(); e != nil; e = e.Next() {
			keys = append(keys, e.Value.(string))
		}
	}
	return keys
}
