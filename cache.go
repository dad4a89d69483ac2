package idemguard

import (
	"sync"
	"time"
)

// replayCache keeps recent succeeded results in memory. A succeeded row is
// final until it expires (no transition leaves succeeded before expires_at),
// so serving it from memory is exact as long as the entry is dropped before
// the row can expire; entries live at most ReplayCacheMaxAge and never past
// the row's remaining TTL as measured on the store's clock when it was read.
//
// It is bounded three ways: ReplayCacheSize entries, ReplayCacheBytes in
// all (each entry counted by entrySize), and ReplayCacheTenantBytes per
// tenant. A tenant over its share evicts its own least recently used
// entries, so one tenant's answers never push out more of the others'
// than the cache holds beyond that share.
type replayCache struct {
	mu          sync.Mutex
	max         int
	maxBytes    int64
	tenantBytes int64
	bytes       int64
	items       map[cacheKey]*cacheEntry
	order       entryList // front = most recently used
	tenants     map[string]*tenantEntries
}

// tenantEntries are one tenant's entries, front = most recently used.
type tenantEntries struct {
	bytes int64
	order entryList // through cacheEntry.mine
}

type cacheKey struct{ tenant, scope, keyHash string }

type cacheEntry struct {
	key         cacheKey
	fingerprint string
	res         Result
	until       time.Time
	size        int64
	all         entryLinks     // in the cache's order
	mine        entryLinks     // in the tenant's order
	tenant      *tenantEntries // the tenant's entries
}

// entryOverhead is what an entry costs besides its bytes: the map and list
// elements, the Result, its strings' headers.
const entryOverhead = 512

// entrySize is what an entry of res holds in memory, near enough: the
// body, and the envelope decoded beside it (its data's values are about
// as long as the body), the headers and the strings of the key.
func entrySize(k cacheKey, fingerprint string, res Result) int64 {
	n := int64(entryOverhead + len(k.tenant) + len(k.scope) + len(k.keyHash) + len(fingerprint) + len(res.KeyHash))
	n += int64(len(res.Body))
	if res.Envelope.Data != nil {
		n += int64(len(res.Body))
	}
	for name, vs := range res.Header {
		n += int64(len(name))
		for _, v := range vs {
			n += int64(len(v)) + 16
		}
	}
	for _, f := range res.DroppedFields {
		n += int64(len(f)) + 16
	}
	return n
}

func newReplayCache(size int, maxBytes, tenantBytes int64) *replayCache {
	if size < 0 || maxBytes < 0 {
		return nil
	}
	return &replayCache{max: size, maxBytes: maxBytes, tenantBytes: min(tenantBytes, maxBytes),
		items: make(map[cacheKey]*cacheEntry), tenants: make(map[string]*tenantEntries)}
}

// get returns the key's entry: its result and fingerprint, and the
// entry's own copy of keyHash (the same characters in the entry's memory:
// the audit tallies of the key's cached replays share it, so comparing
// their key hashes is comparing two pointers, not 64 characters).
func (c *replayCache) get(tenant, scope, keyHash string, now time.Time) (res Result, fingerprint, entryHash string, ok bool) {
	if c == nil {
		return Result{}, "", "", false
	}
	k := cacheKey{tenant, scope, keyHash}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.items[k]
	if !ok {
		return Result{}, "", "", false
	}
	if !now.Before(e.until) {
		c.remove(e)
		return Result{}, "", "", false
	}
	c.order.moveToFront(e)
	e.tenant.order.moveToFront(e)
	return e.res, e.fingerprint, e.key.keyHash, true
}

func (c *replayCache) put(tenant, scope, keyHash, fingerprint string, res Result, until time.Time) {
	if c == nil || res.Body == nil {
		return
	}
	k := cacheKey{tenant, scope, keyHash}
	size := entrySize(k, fingerprint, res)
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.items[k]; ok {
		c.remove(old)
	}
	if size > c.tenantBytes {
		return // an answer larger than a tenant's share is read from the store
	}
	t := c.tenants[tenant]
	if t == nil {
		t = &tenantEntries{order: entryList{tenant: true}}
		c.tenants[tenant] = t
	}
	e := &cacheEntry{key: k, fingerprint: fingerprint, res: res, until: until, size: size, tenant: t}
	c.order.pushFront(e)
	t.order.pushFront(e)
	c.items[k] = e
	c.bytes += size
	t.bytes += size
	for t.bytes > c.tenantBytes {
		c.remove(t.order.back)
	}
	for c.order.Len() > c.max || c.bytes > c.maxBytes {
		c.remove(c.order.back)
	}
}

// drop forgets the key's entry, if there is one.
func (c *replayCache) drop(tenant, scope, keyHash string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[cacheKey{tenant, scope, keyHash}]; ok {
		c.remove(e)
	}
}

// remove drops the entry e (c.mu held).
func (c *replayCache) remove(e *cacheEntry) {
	c.order.remove(e)
	delete(c.items, e.key)
	c.bytes -= e.size
	t := e.tenant
	t.order.remove(e)
	t.bytes -= e.size
	if t.order.Len() == 0 {
		delete(c.tenants, e.key.tenant)
	}
}

// entryLinks are an entry's neighbours in one entryList.
type entryLinks struct{ prev, next *cacheEntry }

// entryList is a doubly linked list of cache entries through their own
// links (the cache's order through all, a tenant's through mine): adding
// an entry allocates nothing, where container/list allocates an element
// per list.
type entryList struct {
	front, back *cacheEntry
	n           int
	tenant      bool // linked through mine, not all
}

func (l *entryList) links(e *cacheEntry) *entryLinks {
	if l.tenant {
		return &e.mine
	}
	return &e.all
}

// Len is the number of entries in l.
func (l *entryList) Len() int { return l.n }

func (l *entryList) pushFront(e *cacheEntry) {
	*l.links(e) = entryLinks{next: l.front}
	if l.front != nil {
		l.links(l.front).prev = e
	} else {
		l.back = e
	}
	l.front = e
	l.n++
}

func (l *entryList) remove(e *cacheEntry) {
	el := l.links(e)
	if el.prev != nil {
		l.links(el.prev).next = el.next
	} else {
		l.front = el.next
	}
	if el.next != nil {
		l.links(el.next).prev = el.prev
	} else {
		l.back = el.prev
	}
	*el = entryLinks{}
	l.n--
}

func (l *entryList) moveToFront(e *cacheEntry) {
	if l.front != e {
		l.remove(e)
		l.pushFront(e)
	}
}
