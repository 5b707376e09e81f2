package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/flextensor-go/flextensor/kernels/cudabackend"
	"github.com/flextensor-go/flextensor/runtime/cuda"
	"github.com/flextensor-go/flextensor/runtime/kernelcache"
	ftsession "github.com/flextensor-go/flextensor/session"
	"github.com/spf13/pflag"
)

func init() {
	register(command{name: "kernels", summary: "compile the GPU kernels ahead of time into a kernel cache directory", run: kernelsCmd,
		define: func(fs *pflag.FlagSet) { kernelsFlags(fs) }})
}

const kernelsUsage = `
infer kernels compiles the CUDA kernels with NVRTC for a GPU and writes them
into a kernel cache directory, so that later processes load them instead of
compiling (make build-cuda runs it with --out bin/kernels: a binary reads the
"kernels" directory next to itself, then $FT_KERNEL_CACHE or the user cache
directory, and writes what it compiles to the latter).

Usage:
  infer kernels [--device cuda:N] [--out DIR]

Examples:
  infer kernels --out bin/kernels
`

type kernelsOptions struct{ device, out string }

func kernelsFlags(fs *pflag.FlagSet) *kernelsOptions {
	var o kernelsOptions
	fs.StringVar(&o.device, "device", "cuda:0", "the GPU to compile for: cuda:N")
	fs.StringVar(&o.out, "out", "", "cache directory to write (default: $FT_KERNEL_CACHE or the user cache directory)")
	return &o
}

func kernelsCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("kernels", kernelsUsage, stderr)
	o := kernelsFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	isCUDA, index, err := ftsession.ParseDevice(o.device)
	if err != nil || !isCUDA {
		return usagef("--device %q: want cuda:N (kernels are compiled for a GPU)", o.device)
	}
	cache := &kernelcache.Cache{Dir: o.out}
	if o.out == "" {
		cache.Dir = kernelcache.Default().Dir
		if cache.Dir == "" {
			return usagef("no kernel cache directory: give --out (FT_KERNEL_CACHE is off, or there is no user cache directory)")
		}
	}
	before := cacheFiles(cache.Dir)
	start := time.Now()
	dev, err := cuda.OpenWith(index, cuda.Options{KernelCache: cache})
	if err != nil {
		return err
	}
	_, err = cudabackend.New(dev)
	if cerr := dev.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	after := cacheFiles(cache.Dir)
	fresh := 0
	for name := range after {
		if !before[name] {
			fresh++
		}
	}
	fmt.Fprintf(stdout, "%s: kernels in %s (%d file(s), %d new) in %v\n", o.device, cache.Dir, len(after), fresh, time.Since(start).Round(time.Millisecond))
	return nil
}

// cacheFiles lists the entries of a kernel cache directory.
func cacheFiles(dir string) map[string]bool {
	out := map[string]bool{}
	matches, _ := filepath.Glob(filepath.Join(dir, "sm*.cubin"))
	for _, m := range matches {
		if st, err := os.Stat(m); err == nil && st.Mode().IsRegular() {
			out[filepath.Base(m)] = true
		}
	}
	return out
}
