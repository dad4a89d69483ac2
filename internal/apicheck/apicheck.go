// Package apicheck lists the exported API of the module's public packages, one
// declaration a line, in the manner of the Go distribution's api/ files. The
// list is committed as docs/api.txt; TestAPIUnchanged fails when the source
// declares another surface than the file records, so a change of the public
// API is always a change of that file too, seen in review (see CHANGELOG.md
// for what a change of it means for a release).
//
// Only syntax is read (go/parser), not types: a line shows a declaration as
// it is written, which is what a reader of the diff needs.
package apicheck

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// Public reports whether the package in directory rel (slash-separated,
// relative to the module root, "." for the root) is part of the public API:
// every package but those under internal/, cmd/, integration/, web/, deploy/
// and testdata directories.
func Public(rel string) bool {
	for _, part := range strings.Split(rel, "/") {
		switch part {
		case "internal", "cmd", "integration", "web", "deploy", "testdata", "node_modules", "docs":
			return false
		}
		if strings.HasPrefix(part, ".") && part != "." {
			return false
		}
	}
	return true
}

// List returns the sorted API lines of every public package below root, the
// directory of the module whose path is modulePath.
func List(root, modulePath string) ([]string, error) {
	var lines []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if rel != "." {
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
				return filepath.SkipDir // another module
			}
		}
		if !Public(rel) {
			return filepath.SkipDir
		}
		pkgLines, err := listDir(p, path.Join(modulePath, rel))
		if err != nil {
			return err
		}
		lines = append(lines, pkgLines...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Strings(lines)
	return lines, nil
}

// listDir lists the exported declarations of the non-test Go files of one
// directory (none when it holds no package, or only package main).
func listDir(dir, importPath string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	var lines []string
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		if f.Name.Name == "main" || ignored(f) {
			continue
		}
		l := lister{fset: fset, prefix: "pkg " + strings.TrimSuffix(importPath, "/.") + ", "}
		for _, d := range f.Decls {
			l.decl(d)
		}
		lines = append(lines, l.lines...)
	}
	return lines, nil
}

// ignored reports whether a build constraint keeps the file out of an
// ordinary build (a //go:build ignore tool, for instance).
func ignored(f *ast.File) bool {
	for _, g := range f.Comments {
		if g.Pos() > f.Package {
			break
		}
		for _, c := range g.List {
			if strings.HasPrefix(c.Text, "//go:build ") && strings.Contains(c.Text, "ignore") {
				return true
			}
		}
	}
	return false
}

type lister struct {
	fset   *token.FileSet
	prefix string
	lines  []string
}

func (l *lister) add(format string, args ...any) {
	l.lines = append(l.lines, l.prefix+fmt.Sprintf(format, args...))
}

func (l *lister) expr(e ast.Expr) string {
	var b bytes.Buffer
	_ = printer.Fprint(&b, l.fset, e)
	return strings.Join(strings.Fields(b.String()), " ")
}

func (l *lister) decl(d ast.Decl) {
	switch d := d.(type) {
	case *ast.FuncDecl:
		l.funcDecl(d)
	case *ast.GenDecl:
		for _, s := range d.Specs {
			switch s := s.(type) {
			case *ast.TypeSpec:
				l.typeSpec(s)
			case *ast.ValueSpec:
				l.valueSpec(d.Tok, s)
			}
		}
	}
}

func (l *lister) funcDecl(d *ast.FuncDecl) {
	if !d.Name.IsExported() {
		return
	}
	sig := strings.TrimPrefix(l.expr(d.Type), "func")
	if d.Recv == nil {
		l.add("func %s%s", d.Name.Name, sig)
		return
	}
	recv := l.expr(d.Recv.List[0].Type)
	base := strings.TrimPrefix(recv, "*")
	if i := strings.IndexByte(base, '['); i >= 0 {
		base = base[:i]
	}
	if !ast.IsExported(base) {
		return
	}
	l.add("method (%s) %s%s", recv, d.Name.Name, sig)
}

func (l *lister) typeSpec(s *ast.TypeSpec) {
	if !s.Name.IsExported() {
		return
	}
	name := s.Name.Name
	if s.TypeParams != nil {
		name += l.typeParams(s.TypeParams)
	}
	alias := ""
	if s.Assign.IsValid() {
		alias = "= "
	}
	switch t := s.Type.(type) {
	case *ast.StructType:
		l.add("type %s %sstruct", name, alias)
		for _, f := range t.Fields.List {
			typ := l.expr(f.Type)
			if len(f.Names) == 0 {
				if ast.IsExported(strings.TrimPrefix(typ, "*")) || strings.Contains(typ, ".") {
					l.add("type %s struct, embedded %s", name, typ)
				}
				continue
			}
			for _, n := range f.Names {
				if n.IsExported() {
					l.add("type %s struct, %s %s", name, n.Name, typ)
				}
			}
		}
	case *ast.InterfaceType:
		l.add("type %s %sinterface", name, alias)
		for _, m := range t.Methods.List {
			if len(m.Names) == 0 {
				l.add("type %s interface, embedded %s", name, l.expr(m.Type))
				continue
			}
			for _, n := range m.Names {
				if n.IsExported() {
					l.add("type %s interface, %s%s", name, n.Name, strings.TrimPrefix(l.expr(m.Type), "func"))
				}
			}
		}
	default:
		l.add("type %s %s%s", name, alias, l.expr(s.Type))
	}
}

// typeParams writes a type parameter list as it is declared: [K comparable, V any].
func (l *lister) typeParams(fl *ast.FieldList) string {
	var params []string
	for _, f := range fl.List {
		for _, n := range f.Names {
			params = append(params, n.Name+" "+l.expr(f.Type))
		}
	}
	return "[" + strings.Join(params, ", ") + "]"
}

func (l *lister) valueSpec(tok token.Token, s *ast.ValueSpec) {
	for _, n := range s.Names {
		if !n.IsExported() {
			continue
		}
		if s.Type != nil {
			l.add("%s %s %s", tok, n.Name, l.expr(s.Type))
		} else {
			l.add("%s %s", tok, n.Name)
		}
	}
}
