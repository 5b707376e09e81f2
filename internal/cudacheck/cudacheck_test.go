package cudacheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRepoCUDABuild: the packages of the cuda build (the CUDA backend, the
// cuda-tagged files elsewhere and every test) type-check, so that a change
// to them that would not compile fails here, on a machine without CUDA,
// rather than first on the GPU machine.
func TestRepoCUDABuild(t *testing.T) {
	if testing.Short() {
		t.Skip("type-checks the whole module from source")
	}
	found, err := Check("../..", []string{"cuda"}, "./...")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range found {
		t.Error(e)
	}
}

// TestCheckFindsErrors: in a module of its own, a type error in a
// cuda-tagged file and one in its in-package test are found; a package
// with cgo files (C faked) is checked for the types it gives but its
// errors are not reported; a file for other builds is not read; a file
// that does not parse is an error of Check's own.
func TestCheckFindsErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/m\n\ngo 1.22\n")
	write("c/c.go", "//go:build cuda\n\npackage c\n\n// #include <stdlib.h>\nimport \"C\"\n\n// Free frees.\nfunc Free(p int) int { C.free(C.int(p)); return 1 }\n")
	write("dev.go", "//go:build cuda\n\npackage m\n\nimport \"example.com/m/c\"\n\nfunc Good() int { return c.Free(0) }\n\nfunc Bad() int { return \"text\" }\n")
	write("host.go", "//go:build !cuda\n\npackage m\n\nfunc Other() int { return notDefined }\n")
	write("dev_test.go", "//go:build cuda\n\npackage m\n\nimport \"testing\"\n\nfunc TestX(t *testing.T) { var s string = Bad(); _ = s }\n")
	found, err := Check(dir, []string{"cuda"}, "./...")
	if err != nil {
		t.Fatal(err)
	}
	var msgs []string
	for _, e := range found {
		msgs = append(msgs, e.Error())
	}
	all := strings.Join(msgs, "\n")
	if len(found) != 2 || !strings.Contains(all, "dev.go:9") || !strings.Contains(all, "dev_test.go:7") {
		t.Errorf("found %d errors, want dev.go:9 and dev_test.go:7:\n%s", len(found), all)
	}
	write("dev.go", "//go:build cuda\n\npackage m\n\nfunc Bad( {\n")
	if _, err := Check(dir, []string{"cuda"}, "./..."); err == nil {
		t.Error("a file that does not parse: no error")
	}
}
