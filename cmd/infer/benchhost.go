package main

import (
	"fmt"
	"io"
	"slices"

	"github.com/flextensor-go/flextensor/kernels/host"
	"github.com/spf13/pflag"
)

func init() {
	register(command{name: "bench-host", summary: "measure the host CPU's read bandwidth and the host GEMV kernels against it", run: benchHostCmd,
		define: func(fs *pflag.FlagSet) { benchHostFlags(fs) }})
}

const benchHostUsage = `
infer bench-host measures what the host kernels (package kernels/host) reach
on this machine's CPU: first a STREAM-like read over a large buffer on all
threads (the read-bandwidth ceiling), then the decode GEMVs of Llama-3-8B
(fused q/k/v, o, fused gate·up, down, LM head) over BF16 and FP8 E4M3
weights, printing for each the weight bytes, the best time, GB/s and the
share of the read bandwidth. Decode is memory-bound: the goal is ≥ 80%.
The full table (every shape, BF16 and FP8, 1 and 4 tokens, a 1 GiB read
buffer) is the command with no flags.

Usage:
  infer bench-host [--threads N] [--level auto|generic|avx2|avx512] [--tokens 1,4]
                   [--kinds bf16,fp8-channel,fp8-block128] [--shapes qkv,o,gateup,down,lmhead]

Examples:
  infer bench-host --read-mib 16 --reps 1 --shapes o --kinds bf16 --tokens 1
  infer bench-host --threads 4 --shapes qkv,down --kinds fp8-block128 --tokens 1,4 --read-mib 16 --reps 1
  infer bench-host --layer --layer-scale 8 --layer-iters 3 --threads 2
  infer bench-host --copy-device cuda:0 --threads 16 --layer --layer-count 8
  infer bench-host --chunk-map 16 --threads 16 --chunk-passes 3 --chunk-fresh 3

With --layer (on the H200 machine: --layer --threads 16) it builds one decoder layer of the Llama-3-8B shape (436 MB of
BF16 weights, a host KV cache of --context positions) on the host backend
and prints the median step of the layer as a host-placed layer runs it, of
its separate ops (the path FT_HOST_LAYER=0 selects), of its GEMVs alone
(the floor), and the median time of each stage of the one-op path. No GPU;
--layer-scale divides the widths (8: 7 MB, seconds on a small machine).
--layer-count N rotates the steps over N distinct layers (N × 436 MB),
The weights are in huge-page host memory mapped as the offload engine's
pinned blocks are (the default), in a GPU's pinned host memory itself
(--layer-pinned cuda:0), or on the Go heap (--layer-pinned heap, 4 KiB
pages unless THP is "always"); it prints which, and the huge pages backing
them.

With --copy-device cuda:0 it measures whether that GPU's host-to-device
copies (out of its pinned host memory, where the offload engine streams
weights from) and the host cores' reads share the host's DRAM read rate:
the STREAM-like read alone (--read-mib, --threads), the copies alone
(--copy-mib, --copy-chunk-mib), and both at once over different buffers,
--probe-ms each; with --layer also one host layer's median step alone and
beside the copies. --copy-device cpu runs the same with memcpy copies.

With --chunk-map GIB (e.g. --chunk-map 16 --threads 16) it maps GIB GiB
(fractions allowed) as the engine's pinned blocks are mapped on the host
and prints the STREAM-like read rate of every --chunk-mib chunk of it in
--chunk-passes shuffled passes, then how much chunks differ from each
other against how much one chunk differs from pass to pass, and the huge
pages behind the mapping (as root also each chunk's guest-physical
range, from /proc/self/pagemap); --chunk-fresh N maps it afresh N times and
prints each allocation's median, showing whether allocations differ as a
whole. --chunk-map and --copy-device are modes of their own: they take
neither each other nor --layer-pinned or --shapes (--chunk-map no --layer).
`

type benchHostOptions struct {
	layer                  bool
	context, scale, iters  int
	layers                 int    // --layer-count
	pinned                 string // --layer-pinned
	threads, reps, readMiB int
	level                  string
	tokens                 []int
	kinds, shapes          []string
	probe                  dramProbeOptions // --copy-device and its sizes
	chunk                  chunkMapOptions  // --chunk-map and its sizes
}

func benchHostFlags(fs *pflag.FlagSet) *benchHostOptions {
	var o benchHostOptions
	fs.IntVar(&o.threads, "threads", 0, "goroutines for the kernels (0: all cores)")
	fs.StringVar(&o.level, "level", "auto", "instruction set: auto, generic, avx2 or avx512")
	fs.IntVar(&o.reps, "reps", 5, "timed repetitions per measurement (the best is reported)")
	fs.IntVar(&o.readMiB, "read-mib", 1024, "size of the read-bandwidth buffer in MiB (several times the last-level cache)")
	fs.IntSliceVar(&o.tokens, "tokens", []int{1, 4}, "token counts (rows of x) to time")
	fs.StringSliceVar(&o.kinds, "kinds", host.Kinds, "weight formats: bf16, fp8-channel, fp8-block128")
	fs.BoolVar(&o.layer, "layer", false, "time one host-placed decoder layer (Llama-3-8B shape, one token) stage by stage instead of the GEMV table")
	fs.IntVar(&o.context, "context", 512, "--layer: cached positions the layer's attention reads")
	fs.IntVar(&o.scale, "layer-scale", 1, "--layer: divide the layer's widths by this (1: Llama-3-8B)")
	fs.IntVar(&o.iters, "layer-iters", 50, "--layer: timed steps of each kind (medians are reported)")
	fs.IntVar(&o.layers, "layer-count", 1, "--layer: distinct layers (own weights and KV cache each) the steps rotate over, so that no step reads weights a previous one left in the CPU's caches (a host stretch reads each layer once a token)")
	fs.StringVar(&o.pinned, "layer-pinned", "", "--layer: where each layer's weights live: a device's pinned host memory (AllocHost, e.g. cuda:0: what the offload engine's host units read), \"heap\" (the Go heap), or unset: huge-page host memory mapped as the engine's pinned blocks")
	fs.StringSliceVar(&o.shapes, "shapes", []string{"qkv", "o", "gateup", "down", "lmhead"}, "Llama-3-8B GEMVs to time: qkv, o, gateup, down, lmhead")
	dramProbeFlags(&o.probe, fs)
	chunkMapFlags(&o.chunk, fs)
	return &o
}

func benchHostCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("bench-host", benchHostUsage, stderr)
	o := benchHostFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	level, err := host.ParseLevel(o.level)
	if err != nil {
		return usagef("--level: %v", err)
	}
	if o.threads < 0 || o.reps < 1 || o.readMiB < 1 {
		return usagef("--threads %d, --reps %d, --read-mib %d: want threads ≥ 0 and reps, read-mib ≥ 1", o.threads, o.reps, o.readMiB)
	}
	for _, T := range o.tokens {
		if T < 1 {
			return usagef("--tokens: %d is not a positive token count", T)
		}
	}
	for _, k := range o.kinds {
		if !slices.Contains(host.Kinds, k) {
			return usagef("--kinds: %q: want some of %v", k, host.Kinds)
		}
	}
	if err := checkModes(o, fs.Changed); err != nil {
		return err
	}
	if o.chunk.gib != 0 {
		return benchChunkMap(o, level, stdout)
	}
	if o.probe.device != "" {
		return benchDRAMProbe(o, level, stdout)
	}
	if o.layer {
		return benchHostLayer(o, level, stdout)
	}
	var shapes []host.Shape
	for _, key := range o.shapes {
		i := slices.IndexFunc(host.Llama3Shapes, func(s host.Shape) bool { return s.Key == key })
		if i < 0 {
			return usagef("--shapes: %q: want some of qkv, o, gateup, down, lmhead", key)
		}
		shapes = append(shapes, host.Llama3Shapes[i])
	}
	e, err := host.NewEngine(host.Options{Threads: o.threads, Level: level})
	if err != nil {
		return err
	}
	defer e.Close()
	read, err := e.ReadBandwidth(int64(o.readMiB)<<20, o.reps)
	if err != nil {
		return err
	}
	amx := "no AMX products (FT_HOST_AMX=off, or no AMX-BF16 tiles granted)"
	if p := e.AMXPasses(); p > 0 {
		amx = fmt.Sprintf("BF16 products of 16+ tokens on the AMX tiles in %d passes (FT_HOST_AMX)", p)
	}
	fmt.Fprintf(stdout, "host kernels: level %v (detected %v), %d threads; %s\n", e.Level(), host.Detect(), e.Threads(), amx)
	fmt.Fprintf(stdout, "read bandwidth (STREAM-like sum over %d MiB): %.1f GB/s\n\n", o.readMiB, read)
	fmt.Fprintf(stdout, "%-22s %-13s %6s %10s %9s %8s %7s %9s\n", "shape", "weights", "tokens", "MB", "ms", "GB/s", "%read", "GFLOP/s")
	for _, s := range shapes {
		for _, kind := range o.kinds {
			for _, T := range o.tokens {
				r, err := e.BenchGEMV(s, kind, T, o.reps)
				if err != nil {
					return err
				}
				flops := 2 * float64(T) * float64(s.N) * float64(s.K) / r.Best.Seconds() / 1e9
				fmt.Fprintf(stdout, "%-22s %-13s %6d %10.1f %9.3f %8.1f %6.0f%% %9.1f\n",
					s.Name, kind, T, float64(r.Bytes)/1e6, r.Best.Seconds()*1e3, r.GBs, 100*r.GBs/read, flops)
			}
		}
	}
	return nil
}

// checkModes rejects flags that the chosen mode would silently ignore:
// --chunk-map and --copy-device are modes of their own (each with its own
// memory), so neither takes the other, --layer-pinned or --shapes, and
// --chunk-map no --layer. changed reports whether a flag was set.
func checkModes(o *benchHostOptions, changed func(name string) bool) error {
	var mode string
	switch {
	case o.chunk.gib != 0:
		mode = "--chunk-map"
		if o.probe.device != "" {
			return usagef("--chunk-map and --copy-device: choose one")
		}
		if o.layer {
			return usagef("--chunk-map and --layer: choose one")
		}
	case o.probe.device != "":
		mode = "--copy-device"
	default:
		return nil
	}
	for _, f := range []string{"layer-pinned", "shapes"} {
		if changed(f) {
			return usagef("%s does not take --%s (it would be ignored)", mode, f)
		}
	}
	return nil
}

// checkLayer validates --layer's sizes (bench-host --layer, and
// --copy-device with --layer).
func checkLayer(o *benchHostOptions) error {
	if o.context < 0 || o.iters < 1 || o.scale < 1 || o.layers < 1 {
		return usagef("--context %d, --layer-iters %d, --layer-scale %d, --layer-count %d: want context ≥ 0, iters ≥ 1, scale ≥ 1, count ≥ 1", o.context, o.iters, o.scale, o.layers)
	}
	return nil
}
