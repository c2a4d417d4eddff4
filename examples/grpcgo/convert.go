// Package grpcgo converts grpc-go's example programs to leangrpc and checks,
// in its test, that they behave the same in all four pairings of a grpc-go
// or leangrpc server with a grpc-go or leangrpc client.
//
// The conversion is the one a user makes by hand, done mechanically on the
// syntax tree (see Convert): the constructors of servers and clients, their
// option types and option constructors move from package grpc to package
// leangrpc; everything else (call options, codes, status, resolvers,
// balancers, credentials) stays grpc-go's.
package grpcgo

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

const (
	grpcPath     = "google.golang.org/grpc"
	leangrpcPath = "github.com/leangrpc/leangrpc"
)

// Rules says which side of grpc-go's API a conversion moves to leangrpc. A
// server program is converted with Server, a client program with Client,
// and a program that is both (wait_for_ready) with either or both, so that
// each end of a pairing is converted on its own.
type Rules struct {
	Server bool // grpc.NewServer, grpc.Server, grpc.ServerOption, the ServerOption constructors
	Client bool // grpc.NewClient, grpc.Dial, grpc.DialContext, grpc.ClientConn, grpc.DialOption, the DialOption constructors
}

// Renames maps identifiers of package grpc to those of package leangrpc.
type Renames map[string]string

// RenamesFor returns the renames of the rules, taking the option
// constructors' names from grpc-go's own source in grpcDir: every exported
// function of package grpc whose only result is a ServerOption (for Server)
// or a DialOption (for Client). The name is kept: when leangrpc lacks the
// option, the converted program fails to build with "undefined:
// leangrpc.X", which names the gap.
func RenamesFor(grpcDir string, r Rules) (Renames, error) {
	server, client, err := optionConstructors(grpcDir)
	if err != nil {
		return nil, err
	}
	m := Renames{}
	if r.Server {
		for _, n := range append(server, "NewServer", "Server", "ServerOption") {
			m[n] = n
		}
	}
	if r.Client {
		for _, n := range append(client, "NewClient", "Dial", "DialContext", "ClientConn", "DialOption") {
			m[n] = n
		}
	}
	return m, nil
}

// optionConstructors lists the exported functions of package grpc in dir
// returning exactly one ServerOption or one DialOption.
func optionConstructors(dir string) (server, client []string, err error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	fset := token.NewFileSet()
	for _, e := range ents {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, nil, err
		}
		if f.Name.Name != "grpc" {
			continue
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv != nil || !fd.Name.IsExported() {
				continue
			}
			res := fd.Type.Results
			if res == nil || len(res.List) != 1 || len(res.List[0].Names) > 1 {
				continue
			}
			id, ok := res.List[0].Type.(*ast.Ident)
			if !ok {
				continue
			}
			switch id.Name {
			case "ServerOption":
				server = append(server, fd.Name.Name)
			case "DialOption":
				client = append(client, fd.Name.Name)
			}
		}
	}
	if len(server) == 0 || len(client) == 0 {
		return nil, nil, fmt.Errorf("no option constructors found in %s", dir)
	}
	return server, client, nil
}

// Convert rewrites one Go source file: each selector grpc.X (grpc being the
// file's name for package google.golang.org/grpc, not shadowed by a local)
// whose X is in renames becomes leangrpc.renames[X]. The file then imports
// leangrpc, and no longer imports grpc when nothing else uses it. A file
// that does not import grpc comes back unchanged.
func Convert(filename string, src []byte, renames Renames) ([]byte, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, filename, src, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	var spec *ast.ImportSpec
	for _, s := range f.Imports {
		if p, _ := strconv.Unquote(s.Path.Value); p == grpcPath {
			spec = s
		}
	}
	if spec == nil || (spec.Name != nil && (spec.Name.Name == "_" || spec.Name.Name == ".")) {
		return src, nil
	}
	local := "grpc"
	if spec.Name != nil {
		local = spec.Name.Name
	}
	const lean = "leangrpc"
	changed, remaining := 0, 0
	ast.Inspect(f, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		x, ok := sel.X.(*ast.Ident)
		// A resolved identifier (Obj set) is a local that shadows the
		// package name.
		if !ok || x.Name != local || x.Obj != nil {
			return true
		}
		if to, ok := renames[sel.Sel.Name]; ok {
			x.Name, sel.Sel.Name = lean, to
			changed++
		} else {
			remaining++
		}
		return false
	})
	if changed == 0 {
		return src, nil
	}
	for _, s := range f.Imports {
		if p, _ := strconv.Unquote(s.Path.Value); p == leangrpcPath {
			return nil, fmt.Errorf("%s already imports leangrpc", filename)
		}
	}
	newPath := &ast.BasicLit{Kind: token.STRING, Value: strconv.Quote(leangrpcPath), ValuePos: spec.Path.ValuePos}
	if remaining == 0 {
		// The grpc import becomes the leangrpc one.
		spec.Name, spec.Path = nil, newPath
	} else {
		if err := addImport(f, spec, newPath); err != nil {
			return nil, fmt.Errorf("%s: %v", filename, err)
		}
	}
	var buf bytes.Buffer
	if err := format.Node(&buf, fset, f); err != nil {
		return nil, err
	}
	return format.Source(buf.Bytes())
}

// addImport adds an import of path to the parenthesised declaration that
// holds after.
func addImport(f *ast.File, after *ast.ImportSpec, path *ast.BasicLit) error {
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.IMPORT {
			continue
		}
		for i, s := range gd.Specs {
			if s != after {
				continue
			}
			if !gd.Lparen.IsValid() {
				return fmt.Errorf("grpc's import is not in a parenthesised import block")
			}
			ns := &ast.ImportSpec{Path: path}
			gd.Specs = append(gd.Specs[:i+1], append([]ast.Spec{ns}, gd.Specs[i+1:]...)...)
			f.Imports = append(f.Imports, ns)
			return nil
		}
	}
	return fmt.Errorf("grpc's import declaration not found")
}
