package config

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// checkYAMLSettings walks the parsed YAML document against rawConfig and reports every mapping key
// that names no setting, with its path, its line and the nearest valid setting at that place (by
// edit distance), and every value of the wrong shape, named by its setting. It returns whether it
// found any problem. Decoding itself is not strict, so these are reported with every other
// problem instead of stopping at the first.
func checkYAMLSettings(doc *yaml.Node, p *problems) bool {
	if doc == nil || doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return false
	}
	before := len(*p)
	walkSettings(doc.Content[0], reflect.TypeFor[rawConfig](), "", p)
	return len(*p) > before
}

func walkSettings(n *yaml.Node, t reflect.Type, at string, p *problems) {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Tag == "!!null" {
		return // an empty value: the default
	}
	wrongType := func(want string) {
		p.add(cmpOr(at, "config file"), "want %s (line %d), got %s", want, n.Line, describeNode(n))
	}
	switch t.Kind() {
	case reflect.Pointer:
		walkSettings(n, t.Elem(), at, p)
	case reflect.String:
		if n.Kind != yaml.ScalarNode {
			wrongType("a single value")
		}
	case reflect.Int, reflect.Int64:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
			wrongType("a whole number")
		}
	case reflect.Bool:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
			wrongType("true or false")
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			wrongType("a mapping (name: value)")
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			walkSettings(n.Content[i+1], t.Elem(), at+"."+n.Content[i].Value, p)
		}
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			wrongType("a list")
			return
		}
		for i, item := range n.Content {
			walkSettings(item, t.Elem(), fmt.Sprintf("%s[%d]", at, i), p)
		}
	case reflect.Struct:
		if t == reflect.TypeFor[yaml.Node]() {
			return // checked by Load (secrets never read from the file)
		}
		if n.Kind != yaml.MappingNode {
			wrongType("a mapping of settings (name: value)")
			return
		}
		walkStruct(n, t, at, p)
	}
}

// walkStruct checks a mapping n against the settings of struct type t:
// every key a known setting (else the nearest one is named), every value
// of its setting's type; `<<: *anchor` merges are followed.
func walkStruct(n *yaml.Node, t reflect.Type, at string, p *problems) {
	fields := settingFields(t)
	names := make([]string, 0, len(fields))
	for name := range fields {
		names = append(names, name)
	}
	slices.Sort(names)
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, val := n.Content[i], n.Content[i+1]
		if key.Tag == "!!merge" { // <<: *anchor merges the anchored mapping(s) here
			if val.Kind == yaml.SequenceNode {
				for _, v := range val.Content {
					walkSettings(v, t, at, p)
				}
			} else {
				walkSettings(val, t, at, p)
			}
			continue
		}
		path := qualify(at, key.Value)
		ft, ok := fields[key.Value]
		if !ok {
			p.add(truncate(path, 100), "unknown setting (line %d); the nearest valid setting here is %s "+
				"(docs/CONFIGURATION.md lists them all)", key.Line, qualify(at, nearest(key.Value, names)))
			continue
		}
		walkSettings(val, ft, path, p)
	}
}

// describeNode names what a YAML node holds, without its value (which may be a secret).
func describeNode(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	switch n.Tag {
	case "!!int", "!!float":
		return "a number"
	case "!!bool":
		return "a boolean"
	}
	return "a string"
}

func qualify(at, name string) string {
	if at == "" {
		return name
	}
	return at + "." + name
}

// settingFields maps each YAML key of struct type t to its field's type, following inline
// fields.
func settingFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for f := range t.Fields() {
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		switch {
		case name == "-":
		case strings.Contains(opts, "inline"):
			for k, v := range settingFields(f.Type) {
				out[k] = v
			}
		case name != "":
			out[name] = f.Type
		}
	}
	return out
}

// nearest returns the candidate with the smallest edit distance to s (the first in order on a
// tie).
func nearest(s string, candidates []string) string {
	best, bestDist := "", -1
	for _, c := range candidates {
		if d := editDistance(strings.ToLower(s), c); bestDist < 0 || d < bestDist {
			best, bestDist = c, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
