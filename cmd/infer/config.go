package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/agnivade/levenshtein"
	"github.com/spf13/pflag"
)

// Settings come from three places, the first that has one winning:
//
//  1. the command line (--gpu-budget 8GiB);
//  2. environment variables FT_<FLAG> with dashes as underscores
//     (FT_GPU_BUDGET=8GiB);
//  3. a JSON config file named by --config or FT_CONFIG, whose keys are flag
//     names, either at the top level (for every command) or inside an object
//     named after a command: {"device": "cuda:0", "run-model": {"max-new-tokens": 64}}.
//
// An FT_ variable or config key that names no flag of any command is an
// error that suggests the closest name.

// extraEnv are FT_ variables that are not flags, with the values each
// takes (nil: any value).
var extraEnv = map[string][]string{
	"FT_CONFIG":              nil,                                     // the config file
	"FT_FORCE_PROGRESS":      {"", "0", "1"},                          // draw progress bars even when stderr is not a terminal (tests)
	"FT_SOAK":                nil,                                     // forwards in the offload soak test
	"FT_TRACE":               {"", "0", "1"},                          // print set-up step durations, plans put in force and bench's timed-forwards line (GC, CPU steal, context switches) to stderr
	"FT_PINNED":              {"", "register", "alloc"},               // "alloc": pin host blocks with cuMemHostAlloc instead of cuMemHostRegister (cuda builds)
	"FT_KERNEL_CACHE":        nil,                                     // the kernel cache directory, or "off"
	"FT_TEST_STALL":          {"", "open", "load"},                    // tests: block at a phase until a signal (see stallForTest)
	"FT_NCCL_LIB":            nil,                                     // the libnccl to load for several GPUs (cuda builds)
	"FT_DECODE_ATTN":         {"", "legacy"},                          // "legacy": the staged decode attention + combine launch (A/B runs, cuda builds)
	"FT_FUSE_ADDNORM":        {"", "0", "1"},                          // "0": residual add and RMSNorm as two launches (A/B runs, cuda builds)
	"FT_GEMV":                gemvValues,                              // "rowblocks": one-token products by the row-block GEMV kernels; "persist": by gemv.cu's persistent GEMVs; "pipe"/unset: by the software-pipelined GEMVs; "bal2"/"bal4"/"bal": by their split-K twins; "mixed": q/k/v by gemv.cu's, the rest pipelined (A/B runs, cuda builds)
	"FT_DECODE_SPLIT":        {"", "16", "32", "64"},                  // cache positions per block of the staged one-sequence decode attention (A/B runs, cuda builds)
	"FT_FLASH":               {"", "legacy"},                          // "legacy": the 64-row prefill flash kernels and scalar RoPE + KV store (A/B runs, cuda builds)
	"FT_DECODE_PIPE":         {"", "0", "1"},                          // "0": the single-buffered tensor-core decode attention, not the pipelined one (A/B runs, cuda builds)
	"FT_DECODE_CHUNK":        {"", "64", "128", "256", "512", "1024"}, // fewest positions per split of the pipelined decode attention (A/B runs, cuda builds)
	"FT_SKIP_KERNELS":        nil,                                     // timing diagnostic: kernel-name prefixes whose launches are dropped (results wrong; cuda builds)
	"FT_BLOCK_TRACE":         nil,                                     // timing diagnostic: a file; the kernels record their blocks' times and bench appends one replayed decode step's launches to it (cuda builds)
	"FT_PDL":                 {"", "0", "1"},                          // "0": no programmatic dependent launch of the decode kernels on sm_90 (A/B runs, cuda builds)
	"FT_FUSE_NORM":           {"", "0", "1"},                          // "1": RMSNorm folded into the one-token q/k/v, gate·up and LM head GEMVs (measured slower, off by default; A/B runs, cuda builds)
	"FT_GEMV_EARLY":          {"", "0", "1"},                          // "0": the one-token BF16 GEMVs wait for the kernel before them and only then load weights (the default issues each warp's first weight loads before that wait; A/B runs, cuda builds)
	"FT_NORM_TAIL":           {"", "0", "1"},                          // "1": the one-token o_proj/down_proj GEMVs' last block writes the RMSNorm after them (measured slower, off by default; A/B runs, cuda builds)
	"FT_VARLEN_CONTIG":       {"", "0", "1"},                          // "0": a batched forward whose prefills all start at position 0 runs their attention over the paged pool as before; the packed path (their keys and values from the forward's packed rows) is the default since s11b (cuda builds)
	"FT_SWIGLU_GEMM":         {"", "0", "1", "regs", "tma"},           // "0": a forward of 256 tokens or more runs gate, up (cuBLASLt) and silu·mul as separate launches; the default (sm_90a) is one wgmma GEMM of our own with silu·mul in its epilogue (since s23b), storing by TMA (since s37); "regs": its epilogue storing from registers (A/B runs; cuda builds)
	"FT_QKV_GEMM":            {"", "0", "1"},                          // "1": a forward of 256 tokens or more runs q, k, v, RoPE and the KV-cache store as one wgmma GEMM of our own with the rest in its epilogue, storing through shared memory and TMA (sm_90a, head width 128; as fast as the separate kernels, s37b; A/B runs, cuda builds)
	"FT_FUSED_GROUP":         nil,                                     // row tiles a group of the fused GEMMs' tile order (0 or unset: 16; A/B runs, cuda builds)
	"FT_FUSE_ROPE":           {"", "0", "1"},                          // "1": a decode step's RoPE and KV store in the q/k/v GEMV's epilogue, not their own launch (measured slower, off by default; A/B runs, cuda builds)
	"FT_DECODE_CLUSTER":      {"", "0", "1", "2", "4", "8"},           // "0": one-token decode attention over caches of at most 2,048 rows merges its splits through global memory and a counter, not inside a thread-block cluster; "2"/"4"/"8": clusters of that many splits at every such capacity (A/B runs, cuda builds)
	"FT_DECODE_CLUSTER_PUSH": {"", "0", "1"},                          // "0": the short-cache decode attention\'s cluster twins merge by remote loads between two cluster barriers instead of by pushes into the owning blocks and one barrier (A/B runs, cuda builds)
	"FT_QKNORM_ROPE":         {"", "0", "1", "all"},                   // Qwen3-style q/k norms, RoPE and KV store as one kernel: unset/"1" for one-token steps, "all" for every forward, "0" never (two launches; A/B runs, cuda builds)
	"FT_ASYNC_DECODE":        {"", "0", "1"},                          // "0": greedy Generate waits for each step's token before the next step (the default keeps one step in flight, its token picked and fed to the next step on the device: kernels.TokenFeeder; cuda builds)
	"FT_DECODE_MEGA":         {"", "0", "1"},                          // "1": a plain BF16 layer's one-token step as one persistent kernel with grid barriers (measured slower than the separate kernels, 156.5 against 129.8 µs a layer in s11f; off by default, an experiment; cuda builds)
	"FT_FP8_GEMV":            {"", "legacy"},                          // "legacy": FP8 weights through the first FP8 kernels, one GEMV launch per projection (A/B runs, cuda builds)
	"FT_FP8_VARIANT":         fp8VariantValues,                        // the tuning of the one-token FP8 GEMVs: auto (default, per kind and width) or one forced, e.g. u8r1s (A/B sweeps, cuda builds)
	"FT_FP8_PERSIST":         {"", "all", "gateup", "none"},           // the auto picks' persistent forms (mp2/mp4: one wave of blocks looping over tiles) for every kind (the default), gate·up only, or none (A/B runs, cuda builds)
	"FT_FP8_ADD":             {"", "0", "1"},                          // "0": a decode step's FP8 o_proj/down_proj write their products and separate adds put them into the residual, instead of the GEMV adding (A/B runs, cuda builds)
	"FT_FP8_GEMM":            {"", "lt", "lt-fast", "dequant"},        // multi-token matmuls by per-channel FP8 weights: cuBLASLt FP8 GEMM (W8A8, default), the same with fast accumulation, or dequantize to BF16 (cuda builds)
	"FT_FP8_GEMM_MIN_TOKENS": nil,                                     // the fewest tokens that take the FP8 GEMM (default 16; cuda builds)
	"FT_FP8_GEMM_SCALES":     {"", "rescale"},                         // "rescale": FP8 GEMM scales by a kernel after cuBLASLt instead of its outer-vector scaling (A/B runs, cuda builds)
	"FT_FP8_FUSE_NORM":       {"", "0", "1"},                          // "0": a decode step's RMSNorms run as their own launches before the FP8 q/k/v and gate·up GEMVs instead of folded into them (A/B runs, cuda builds)
	"FT_FP8_FUSE":            {"", "0", "1"},                          // "0": a prefill's FP8 MLP unfused (gate/up rescaled, SiLU·up, down input quantized apart) instead of fp8_silu_quant_rows (A/B runs, cuda builds)
	// "cublas": BF16 GEMMs by cublasGemmEx, not the per-shape measured
	// choice of cuBLASLt algorithms; "lt-sustained": that choice measured
	// at sustained clocks, the candidates in turns (A/B runs, cuda builds)
	"FT_GEMM": {"", "lt", "lt-sustained", "cublas"},
	// "0": q/k/v and gate/up of 2..256-token forwards as separate GEMMs,
	// not one GEMM over their adjacent weights; "gateup"/"qkv"/"all":
	// gate/up, q/k/v or both merged at every token count (A/B runs, cuda
	// builds)
	"FT_MERGED_GEMM":        {"", "0", "1", "gateup", "qkv", "all"},
	"FT_PREFILL_RESACC":     {"", "0", "1"},            // "1": forwards of 256+ tokens write o_proj in bf16 and add it to the residual in the post-attention norm, not in the GEMM's fp32 epilogue (A/B runs, cuda builds)
	"FT_NORM_ROWS":          {"", "0", "1"},            // RMSNorm of the F32 residual by the many-rows kernels (same bits): "" for 128 rows or more, "1" for 2 or more, "0" never (A/B runs, cuda builds)
	"FT_CPU_KERNELS":        {"", "host", "reference"}, // the cpu device's kernels: "host"/unset kernels/host's SIMD kernels on a pool of every core, "reference" the reference kernels alone (session.CPUKernelsEnv)
	"FT_HOST_SPIN":          nil,                       // host kernels: how long an idle pool worker spins before parking, a Go duration (A/B runs; kernels/host checks it)
	"FT_HOST_CHUNK_KIB":     nil,                       // host kernels: the GEMV pool chunk cap in KiB, negative: none (A/B runs; kernels/host checks it)
	"FT_HOST_ATTN":          {"", "legacy"},            // "legacy": host attention's weighted sum one pass over V per query head, not one pass for the group in registers (A/B runs; kernels/host)
	"FT_HOST_PREFETCH":      nil,                       // host kernels: bytes ahead the one-token BF16 GEMV tile prefetches each row (unset: 1024; 0: none; A/B runs; kernels/host checks it)
	"FT_HOST_AMX":           nil,                       // host kernels: passes of the AMX tile products of 16+ tokens with BF16 weights (1, 2, 3; off; unset: kernels/host.DefaultAMXPasses; kernels/host checks it)
	"FT_HOST_LAYER":         {"", "0", "1", "jobs"},    // a host-placed layer's decode step: "0" separate ops, "jobs" one op of five pool jobs, "1"/unset one op, one pool job (A/B runs; kernels/host)
	"FT_HOST_DRAM_GBPS":     nil,                       // the host's DRAM read bandwidth the offload planner's shared-read model uses, GB/s ("measure": measured at start-up; unset or 0: model off; kernels/host checks it)
	"FT_PINNED_HUGE":        {"", "0", "1"},            // "0": pinned host blocks mapped as before (unaligned, MADV_HUGEPAGE only), not 2 MiB-aligned and MADV_COLLAPSE'd (A/B runs, cuda builds)
	"FT_BATCH_HOST":         {"", "off"},               // "off": batched forwards compute no layer on the host (the engine puts a host-free plan in force before each; A/B runs; models/decoder)
	"FT_LAST_LAYER":         {"", "all", "attend-all"}, // "all": a forward runs its last layer past attention on every row, not only on the rows whose logits it returns; "attend-all": past attention on those rows, but every row's queries attend (A/B runs; models/decoder)
	"FT_HOST_KV":            {"", "heap"},              // "heap": host-placed layers' KV storage on the Go heap, each made at its first host forward, not all at once outside the heap (A/B runs)
	"FT_CUDA_SCHED":         cudaSchedValues,           // how a thread waits for the GPU: the primary context's CU_CTX_SCHED_* flag set before it is retained (unset: the driver's, AUTO; A/B runs, cuda builds)
	"FT_PACK_EVICT":         {"", "0", "1"},            // "1": drop the checkpoint from the page cache before packing host blocks, allocate them all before reading, evict each unit's file bytes after its read (A/B runs; offload/packevict.go)
	"FT_HOST_BLOCK_RATES":   {"", "0", "1"},            // "0": do not rate each unit's pinned host block after packing; the planner then estimates every unit's host time from one figure (A/B runs; offload/host_blocks.go)
	"FT_HOST_BLOCK_REALLOC": nil,                       // N: give the plan's host units on slow host blocks fresh pinned blocks, trying up to N (each rated, slow ones held until done; unset or 0: off; A/B runs; offload/host_blocks_realloc.go)
	"FT_HOST_GBPS":          nil,                       // the host GEMV rate, GB/s, the offload planner starts from instead of timing it at start-up (unset or 0: timed; A/B runs; kernels/host checks it)
	"FT_HOST_COPY_MEASURE":  {"", "0", "1"},            // "0": the passes that time the host units do not time the streamed units' copies, and the replan keeps the profiled copy curve (A/B runs; offload/host_copyrate.go)
	"FT_EMBED_HOST":         {"", "0", "1"},            // "0": an offloading engine uploads the token embedding table to the device instead of keeping it in device-mapped host memory (A/B runs; offload/embedhost.go)
	"FT_IDLE_STEP_GRAPH":    {"", "0", "1"},            // "0": one-token forwards of an offloaded model whose plan streams nothing run eagerly through the engine's traps, not as one recorded step replayed inside the root's (A/B runs; models/decoder/idlestep.go)
	"FT_SCHED_GRAPH":        {"", "0", "1"},            // "0": the batch scheduler (run-model --batch-file, serve) runs every step as a batched forward over the paged blocks; by default a request decoding alone steps through a captured graph over a contiguous copy of its KV cache (models/generate)
	"FT_TOKEN_TRACE":        {"", "0", "1"},            // "1": run-model prints a line a token (bench one a timed forward): forward, pick and time outside them, GC cycles, the offload engine's pass (plan in force, what it measured); a steady/other summary at the end (cmd/infer/tokentrace.go)
	// layout of the tensor-core prefill attention: auto (per call) or one
	// for every call (A/B runs, cuda builds; kernels/cudabackend/prefillvariant.go)
	"FT_PREFILL_VARIANT": {"", "auto", "base", "w4m32", "w8q", "m64", "fa2", "wg", "wg6"},
	"FT_DECODE_VARIANT":  {"", "s3w4h1r", "s3w4h1o", "s2w4h1o", "s2w4h1r", "s4w4h1r", "s3w8h1r", "s2w4h4r", "s3w4h4r", "s2w8h8r", "s3w8h8r", "s3w4h1rf", "s3w2h1rf", "s4w2h1rf", "s4w1h1rf", "s6w1h1rf", "s3w4h1t", "s2w4h1t", "s4w2h1t", "s3w2h1t", "s3w4h1tf", "s4w2h1tf", "s3w4h1tp", "s2w4h1tp", "s5w4h1tp", "s4w4h1tp", "s3w8h1tp", "s2w8h1tp"}, // compiled variant of the pipelined decode attention at head width 128 (kernels/cudabackend/decode.go pipeVariants; A/B runs, cuda builds)
	"FT_DECODE_SPLITS":   nil,                                                                                                                                                                                                                                                                                                                        // splits per (row, KV head block) of the pipelined decode attention's grid (A/B runs, cuda builds)
}

// envName is the variable of a flag: gpu-budget → FT_GPU_BUDGET.
func envName(flag string) string {
	return "FT_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// allFlagNames is the union of every command's flag names.
func allFlagNames() map[string]bool {
	names := map[string]bool{"config": true, "help": true}
	for _, c := range commands {
		if c.define == nil {
			continue
		}
		fs := pflag.NewFlagSet(c.name, pflag.ContinueOnError)
		c.define(fs)
		fs.VisitAll(func(f *pflag.Flag) { names[f.Name] = true })
	}
	return names
}

func closest(name string, candidates []string) string {
	best, bestD := "", 1<<30
	for _, c := range candidates {
		if d := levenshtein.ComputeDistance(name, c); d < bestD {
			best, bestD = c, d
		}
	}
	if bestD > max(2, len(name)/3) {
		return ""
	}
	return best
}

// checkEnv rejects FT_ variables that name no flag.
func checkEnv() error {
	known := map[string]bool{}
	var list []string
	for n := range allFlagNames() {
		known[envName(n)] = true
		list = append(list, envName(n))
	}
	for n := range extraEnv {
		known[n] = true
		list = append(list, n)
	}
	sort.Strings(list)
	for _, kv := range os.Environ() {
		name, value, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "FT_") {
			continue
		}
		if name == "FT_HELP" {
			return usagef("FT_HELP=%s: help is not a setting; run 'infer <command> --help'", value)
		}
		if allowed := extraEnv[name]; allowed != nil && !slices.Contains(allowed, value) {
			return usagef("%s=%q: want one of %s", name, value, strings.Join(quoteAll(allowed[1:]), ", "))
		}
		if known[name] {
			continue
		}
		if c := closest(name, list); c != "" {
			return usagef("unknown environment variable %s (did you mean %s?)", name, c)
		}
		return usagef("unknown environment variable %s (FT_ variables name flags, e.g. FT_GPU_BUDGET)", name)
	}
	return nil
}

func quoteAll(xs []string) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = strconv.Quote(x)
	}
	return out
}

// applyDefaults fills the flags the command line left unset from the
// environment, then from the config file.
func applyDefaults(fs *pflag.FlagSet, command string) error {
	if err := checkEnv(); err != nil {
		return err
	}
	setByEnv := map[string]bool{}
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		if err != nil || f.Changed || f.Name == "help" {
			return
		}
		if v, ok := os.LookupEnv(envName(f.Name)); ok {
			if e := fs.Set(f.Name, v); e != nil {
				err = usagef("%s=%q: %v", envName(f.Name), v, e)
			}
			setByEnv[f.Name] = true
		}
	})
	if err != nil {
		return err
	}
	path, _ := fs.GetString("config")
	if path == "" {
		path = os.Getenv("FT_CONFIG")
	}
	if path == "" {
		return nil
	}
	values, err := readConfigFile(path, command)
	if err != nil {
		return err
	}
	keys := make([]string, 0, len(values))
	for k := range values {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		f := fs.Lookup(k)
		if f == nil || f.Changed || setByEnv[k] {
			continue // another command's flag, or set more specifically
		}
		if e := fs.Set(k, values[k]); e != nil {
			return usagef("config %s: %q: %v", path, k, e)
		}
	}
	return nil
}

// readConfigFile returns the settings for command: top-level keys, then the
// command's own section over them. Unknown keys are errors.
func readConfigFile(path, command string) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	var raw map[string]any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber() // {"seed": 1000000} is 1000000, not 1e+06
	if err := dec.Decode(&raw); err != nil || raw == nil {
		if err == nil {
			err = errors.New("null")
		}
		return nil, usagef("config %s: not a JSON object: %v", path, err)
	}
	known := allFlagNames()
	var flagList []string
	for n := range known {
		flagList = append(flagList, n)
	}
	sort.Strings(flagList)
	out := map[string]string{}
	add := func(k string, v any, where string) error {
		if !known[k] {
			if c := closest(k, flagList); c != "" {
				return usagef("config %s: unknown key %q%s (did you mean %q?)", path, k, where, c)
			}
			return usagef("config %s: unknown key %q%s", path, k, where)
		}
		switch x := v.(type) {
		case string:
			out[k] = x
		case json.Number:
			out[k] = x.String()
		case bool:
			out[k] = fmt.Sprint(x)
		default:
			return usagef("config %s: key %q%s: want a string, number or boolean", path, k, where)
		}
		return nil
	}
	var section map[string]any
	for k, v := range raw {
		if _, isCmd := commands[k]; isCmd {
			if k == command {
				m, ok := v.(map[string]any)
				if !ok {
					return nil, usagef("config %s: section %q is not an object", path, k)
				}
				section = m
			}
			continue
		}
		if err := add(k, v, ""); err != nil {
			return nil, err
		}
	}
	for k, v := range section {
		if err := add(k, v, " in section "+command); err != nil {
			return nil, err
		}
	}
	return out, nil
}
