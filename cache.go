package idemguard

import (
	"container/list"
	"sync"
	"time"
)

// replayCache keeps recent succeeded results in memory. A succeeded row is
// final until it expires (no transition leaves succeeded before expires_at),
// so serving it from memory is exact as long as the entry is dropped before
// the row can expire; entries live at most ReplayCacheMaxAge and never past
// the row's remaining TTL as measured on the store's clock when it was read.
type replayCache struct {
	mu    sync.Mutex
	max   int
	items map[cacheKey]*list.Element
	order *list.List // front = most recently used
}

type cacheKey struct{ tenant, scope, keyHash string }

type cacheEntry struct {
	key         cacheKey
	fingerprint string
	res         Result
	until       time.Time
}

func newReplayCache(size int) *replayCache {
	if size < 0 {
		return nil
	}
	return &replayCache{max: size, items: make(map[cacheKey]*list.Element), order: list.New()}
}

func (c *replayCache) get(tenant, scope, keyHash string, now time.Time) (Result, string, bool) {
	if c == nil {
		return Result{}, "", false
	}
	k := cacheKey{tenant, scope, keyHash}
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[k]
	if !ok {
		return Result{}, "", false
	}
	e := el.Value.(*cacheEntry)
	if !now.Before(e.until) {
		c.order.Remove(el)
		delete(c.items, k)
		return Result{}, "", false
	}
	c.order.MoveToFront(el)
	return e.res, e.fingerprint, true
}

func (c *replayCache) put(tenant, scope, keyHash, fingerprint string, res Result, until time.Time) {
	if c == nil || res.Body == nil {
		return
	}
	k := cacheKey{tenant, scope, keyHash}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[k]; ok {
		el.Value = &cacheEntry{key: k, fingerprint: fingerprint, res: res, until: until}
		c.order.MoveToFront(el)
		return
	}
	c.items[k] = c.order.PushFront(&cacheEntry{key: k, fingerprint: fingerprint, res: res, until: until})
	for c.order.Len() > c.max {
		last := c.order.Back()
		c.order.Remove(last)
		delete(c.items, last.Value.(*cacheEntry).key)
	}
}
