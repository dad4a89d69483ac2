package sanitize

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Allowlist keeps the fields of a JSON document that a team names: the
// shape stored for a team's own routes, whose answers are its API and not the
// envelope. A path names a member by its key, a nested member with dots
// ("owner.name"), and the members of every element of an array with "[]"
// ("items[].id"). A path that ends at a member keeps its whole value. The
// blocked keys (BlockedKeys, and any the Allowlist adds) are removed at every
// depth all the same, inside kept values too, and every removal is reported.
// Everything not named is dropped and reported. An Allowlist is safe for
// concurrent use.
type Allowlist struct {
	root  *pathNode
	all   bool
	block []string
}

// pathNode is one segment of the allowlist's paths: keep is true where a
// path ends (the whole value is kept), members and elements where it goes on.
type pathNode struct {
	keep     bool
	members  map[string]*pathNode
	elements *pathNode // the node for each element of an array member ("[]")
}

// ErrInvalidPath is returned (wrapped) by NewAllowlist for a path it cannot
// parse, or one that names a blocked key.
var ErrInvalidPath = errors.New("sanitize: invalid allowlist path")

// NewAllowlist returns the Allowlist keeping paths. extraBlocked adds keys
// that are never stored (compared case-insensitively, like BlockedKeys).
func NewAllowlist(paths []string, extraBlocked ...string) (*Allowlist, error) {
	if len(paths) == 0 {
		return nil, fmt.Errorf("%w: no paths; name the fields to keep (or use KeepAllBut to keep everything but the blocked keys)", ErrInvalidPath)
	}
	a := &Allowlist{root: &pathNode{}, block: append([]string(nil), extraBlocked...)}
	for _, p := range paths {
		if err := a.add(p); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// MustAllowlist is NewAllowlist for paths written in the program, as routes
// are registered: it panics on an invalid path.
func MustAllowlist(paths ...string) *Allowlist {
	a, err := NewAllowlist(paths)
	if err != nil {
		panic(err)
	}
	return a
}

// KeepAllBut returns the Allowlist that keeps every field except the
// blocked keys (BlockedKeys and extraBlocked). It is never a default: a team
// that keeps everything says so.
func KeepAllBut(extraBlocked ...string) *Allowlist {
	return &Allowlist{all: true, block: append([]string(nil), extraBlocked...)}
}

func (a *Allowlist) add(path string) error {
	n := a.root
	for _, seg := range strings.Split(path, ".") {
		name, array := strings.CutSuffix(seg, "[]")
		if name == "" || strings.ContainsAny(name, "[]") {
			return fmt.Errorf("%w: %q: each dot-separated segment is a key, optionally followed by []", ErrInvalidPath, path)
		}
		if a.blocked(name) {
			return fmt.Errorf("%w: %q names %q, which is never stored", ErrInvalidPath, path, name)
		}
		if n.members == nil {
			n.members = map[string]*pathNode{}
		}
		next := n.members[name]
		if next == nil {
			next = &pathNode{}
			n.members[name] = next
		}
		if array {
			if next.elements == nil {
				next.elements = &pathNode{}
			}
			next = next.elements
		}
		n = next
	}
	n.keep = true
	return nil
}

func (a *Allowlist) blocked(k string) bool {
	if IsBlockedKey(k) {
		return true
	}
	for _, b := range a.block {
		if strings.EqualFold(k, b) {
			return true
		}
	}
	return false
}

// Document reduces v, which must encode to a JSON object (a map, a struct,
// json.RawMessage), to the allowlisted fields and returns its JSON: object
// keys sorted, numbers as written, so the same kept value always encodes to
// the same bytes. dropped, if not nil, is called once with the path of each
// field removed (never its value): "secret", "owner.debug", "items[].token".
func (a *Allowlist) Document(v any, dropped func(path string)) ([]byte, error) {
	top, err := objectOf(v)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	report := func(p string) {
		if dropped != nil && !seen[p] {
			seen[p] = true
			dropped(p)
		}
	}
	kept := a.object(a.root, top, "", report)
	b, err := json.Marshal(kept)
	if err != nil {
		return nil, fmt.Errorf("sanitize: encode the kept document: %w", err)
	}
	return b, nil
}

// object keeps obj's members that n names (all of them without n, in
// keep-all mode), reporting the rest.
func (a *Allowlist) object(n *pathNode, obj map[string]any, prefix string, report func(string)) map[string]any {
	out := make(map[string]any, len(obj))
	for k, v := range obj {
		p := join(prefix, k)
		if a.blocked(k) {
			report(p)
			continue
		}
		if a.all || n.keep {
			out[k] = a.strip(v, p, report)
			continue
		}
		child := n.members[k]
		if child == nil {
			report(p)
			continue
		}
		if kv, ok := a.member(child, v, p, report); ok {
			out[k] = kv
		}
	}
	return out
}

// member keeps the value v that the path node n reaches.
func (a *Allowlist) member(n *pathNode, v any, p string, report func(string)) (any, bool) {
	if n.keep {
		return a.strip(v, p, report), true
	}
	switch x := v.(type) {
	case map[string]any:
		if len(n.members) > 0 {
			return a.object(n, x, p, report), true
		}
	case []any:
		if n.elements != nil {
			out := make([]any, 0, len(x))
			for _, e := range x {
				if kv, ok := a.member(n.elements, e, p+"[]", report); ok {
					out = append(out, kv)
				}
			}
			return out, true
		}
	case nil:
		return nil, true
	}
	// The value is not the object or array the paths go into.
	report(p)
	return nil, false
}

// strip removes the blocked keys at any depth of a kept value.
func (a *Allowlist) strip(v any, p string, report func(string)) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			if a.blocked(k) {
				report(join(p, k))
				continue
			}
			out[k] = a.strip(e, join(p, k), report)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = a.strip(e, p+"[]", report)
		}
		return out
	}
	return v
}

func join(prefix, k string) string {
	if prefix == "" {
		return k
	}
	return prefix + "." + k
}
