// Package cudacheck type-checks the packages of a build with the cuda tag
// on a machine without the CUDA toolkit (CI, the development machines):
// `go vet -tags cuda` needs cgo, and cgo needs the CUDA headers, so
// without them the Go side of the CUDA backend (kernels/cudabackend,
// runtime/cuda, the cuda-tagged files of other packages and their tests)
// would first compile on the GPU machine. Check parses the files the build
// would compile and type-checks them with go/types, the cgo files with
// package C faked (FakeImportC). It reports the errors of the matched
// packages that have no cgo files: with C faked, what a cgo package (here
// runtime/cuda, the one place of cgo) takes from C has no types, and its
// errors there would be the fake's, not the code's.
package cudacheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// listed is what Check reads of `go list -json` for a package.
type listed struct {
	ImportPath, Dir                              string
	Standard, DepOnly                            bool
	GoFiles, CgoFiles, TestGoFiles, XTestGoFiles []string
	Deps                                         []string // every package it imports, directly or not
}

// checker type-checks packages from source, caching each by import path.
type checker struct {
	fset   *token.FileSet
	pkgs   map[string]listed
	done   map[string]*types.Package
	std    types.Importer
	errs   []error
	seen   map[string]bool           // errors reported so far (a target checked as a dependency and with its tests)
	report map[string]bool           // the packages whose errors are reported: the matched ones without cgo files
	xtest  *types.Package            // while a target's external tests are checked: the target with its in-package tests
	xdone  map[string]*types.Package // then: the packages that import the target, checked against xtest
}

// Check type-checks the packages matching patterns (`go list` patterns,
// run in dir) as `go build -tags` tags would compile them, with their
// tests, and returns every type error found in those without cgo files
// (their dependencies are checked from source too, for the types they
// give, but not reported). An error of its own (go list failing, a file
// that does not parse) comes back as err.
func Check(dir string, tags []string, patterns ...string) (found []error, err error) {
	args := append([]string{"list", "-e", "-json", "-deps", "-test", "-tags", strings.Join(tags, ",")}, patterns...)
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1") // the cgo files listed as such wherever this runs
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("cudacheck: go list: %v: %s", err, stderr.String())
	}
	c := &checker{fset: token.NewFileSet(), pkgs: map[string]listed{}, done: map[string]*types.Package{},
		std: importer.Default(), seen: map[string]bool{}, report: map[string]bool{}}
	var targets []string
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listed
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("cudacheck: go list output: %w", err)
		}
		if strings.Contains(p.ImportPath, " ") || strings.HasSuffix(p.ImportPath, ".test") {
			continue // a test variant or a test main: the plain entry has the files
		}
		c.pkgs[p.ImportPath] = p
		if !p.Standard && !p.DepOnly {
			targets = append(targets, p.ImportPath)
			if len(p.CgoFiles) == 0 {
				c.report[p.ImportPath] = true
			}
		}
	}
	for _, path := range targets {
		p := c.pkgs[path]
		var pkg *types.Package
		if len(p.GoFiles)+len(p.CgoFiles)+len(p.TestGoFiles) > 0 {
			if pkg, err = c.check(path, p.Dir, p.GoFiles, p.CgoFiles, p.TestGoFiles); err != nil {
				return nil, err
			}
		}
		if len(p.XTestGoFiles) > 0 {
			c.xtest, c.xdone = pkg, map[string]*types.Package{}
			_, err = c.check(path+"_test", p.Dir, p.XTestGoFiles) // reported as path's
			c.xtest, c.xdone = nil, nil
			if err != nil {
				return nil, err
			}
		}
	}
	return c.errs, nil
}

// Import is types.Importer: a package of the listing from source (checked
// once), the standard library from its export data. A target's external
// tests see it with its in-package test files, and the packages that
// import it checked against that (as go test builds them).
func (c *checker) Import(path string) (*types.Package, error) {
	done := c.done
	if c.xtest != nil {
		if c.xtest.Path() == path {
			return c.xtest, nil
		}
		if p, ok := c.pkgs[path]; ok && slices.Contains(p.Deps, c.xtest.Path()) {
			done = c.xdone
		}
	}
	if pkg, ok := done[path]; ok {
		return pkg, nil
	}
	p, ok := c.pkgs[path]
	if !ok || p.Standard {
		return c.std.Import(path)
	}
	pkg, err := c.check(path, p.Dir, p.GoFiles, p.CgoFiles)
	if err != nil {
		return nil, err
	}
	done[path] = pkg
	return pkg, nil
}

// check parses the files of dir and type-checks them as package path,
// adding the type errors to c.errs.
func (c *checker) check(path, dir string, lists ...[]string) (*types.Package, error) {
	var files []*ast.File
	for _, names := range lists {
		for _, n := range names {
			f, err := parser.ParseFile(c.fset, filepath.Join(dir, n), nil, parser.SkipObjectResolution)
			if err != nil {
				return nil, fmt.Errorf("cudacheck: %w", err)
			}
			files = append(files, f)
		}
	}
	report := c.report[strings.TrimSuffix(path, "_test")]
	conf := types.Config{FakeImportC: true, Importer: c, Error: func(err error) {
		if report && !c.seen[err.Error()] {
			c.seen[err.Error()] = true
			c.errs = append(c.errs, err)
		}
	}}
	pkg, _ := conf.Check(path, c.fset, files, nil) // the errors went to c.errs
	return pkg, nil
}
