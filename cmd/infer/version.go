package main

import (
	"fmt"
	"io"
	goruntime "runtime"
	"runtime/debug"
)

// printVersion writes the module version, the VCS commit the binary was
// built from (with "+dirty" for uncommitted changes), the Go version and
// whether CUDA is compiled in.
func printVersion(w io.Writer) {
	version, commit, dirty := "(devel)", "unknown", false
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				commit = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	if dirty {
		commit += "+dirty"
	}
	gpu := "without CUDA (CPU only; make build-cuda for GPUs)"
	if builtWithCUDA {
		gpu = "with CUDA"
	}
	fmt.Fprintf(w, "infer (github.com/flextensor-go/flextensor) %s, commit %s, %s, %s/%s, built %s\n",
		version, commit, goruntime.Version(), goruntime.GOOS, goruntime.GOARCH, gpu)
}
