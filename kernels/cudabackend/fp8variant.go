package cudabackend

import (
	"fmt"
	"os"
	"slices"
)

// The tuning variants of the one-token FP8 GEMVs (kernels/cuda/fp8gemv.cu,
// fp8gemv.go). This file has no build tag so that the command line can
// check FT_FP8_VARIANT in every build.

// fp8Variant is one tuning of the FP8 GEMVs (fp8gemv.cu's FP8V_VARIANT):
// U 16-byte loads per lane and row in flight, R rows per warp at a time,
// x as fp32 in shared memory (SmemX) or bf16 from global memory; or, MMA,
// the tensor-core kernels of fp8gemvmma.cu (a block of 8 warps a tile of
// 16 rows, x as f16 in shared memory; U and R unused).
type fp8Variant struct {
	Name  string
	U, R  int
	SmemX bool
	MMA   bool
}

// fp8Variants are the variants compiled into the module; FT_FP8_VARIANT
// forces one by name everywhere (default "auto": fp8AutoPick per launch).
var fp8Variants = []fp8Variant{
	{"u4r1s", 4, 1, true, false}, {"u8r1s", 8, 1, true, false}, {"u16r1s", 16, 1, true, false},
	{"u4r2s", 4, 2, true, false}, {"u8r2s", 8, 2, true, false}, {"u16r2s", 16, 2, true, false},
	{"u4r1g", 4, 1, false, false}, {"u8r1g", 8, 1, false, false}, {"u16r1g", 16, 1, false, false},
	{"u4r2g", 4, 2, false, false}, {"u8r2g", 8, 2, false, false}, {"u16r2g", 16, 2, false, false},
	// Software-pipelined (kernels/cuda/fp8gemvpipe.cu): a warp issues its
	// next batch of 4 chunks (2 a matrix for gate·up) before computing the
	// current one, its first batch before x is staged; p4s stages x as
	// fp32 in shared memory, p4g reads it as bf16 from L1; p2r2s takes two
	// rows at a time (2 chunks each a batch) sharing each x read.
	{"p4s", 4, 1, true, false}, {"p4g", 4, 1, false, false}, {"p2r2s", 2, 2, true, false},
	// On the tensor cores (kernels/cuda/fp8gemvmma.cu): mm2 keeps two
	// k-steps of 128 columns in flight a warp (registers for 3 blocks an
	// SM), mm4 four (2 blocks). Per-channel scales and blocks of 64 or
	// more only (fp8MMATakes).
	{"mm2", 0, 0, true, true}, {"mm4", 0, 0, true, true},
	// Their persistent forms (fp8gemvmma.cu's fm_persist): a grid of one
	// wave, each block looping over tiles with x staged once and its loads
	// in flight across tiles (fp8PersistNB: k-steps in flight a warp). They
	// take K a multiple of 1,024·NB; fp8GEMVs runs mm2/mm4 otherwise.
	{"mp2", 0, 0, true, true}, {"mp4", 0, 0, true, true},
}

// fp8PersistNB is, for each persistent variant, the k-steps a warp keeps
// in flight (the K it takes is a multiple of 1,024 times that) and the
// tensor-core variant it falls back to for another K.
var fp8PersistNB = map[string]struct {
	NB       int
	Fallback string
}{"mp2": {2, "mm2"}, "mp4": {4, "mm4"}}

// fp8PersistTwin is the persistent form of the tensor-core variant name
// (the variant whose fallback it is), "" where it has none.
func fp8PersistTwin(name string) string {
	for p, v := range fp8PersistNB {
		if v.Fallback == name {
			return p
		}
	}
	return ""
}

// fp8PersistOn reports whether FT_FP8_PERSIST's value persist (Backend.FP8Persist)
// asks the auto picks of kind for their persistent form: "" or "all" (the
// default) for every kind, "gateup" for gate·up·SiLU only, "none" for no
// kind. Measured on the H200 (2026-12-04, bench/h200-s28b.sh, Llama-3-8B
// FP8 resident decode at 512, graph replay, two rounds): mm2/mm4 2.71 and
// 2.70 ms a step, gate·up persistent 2.60 and 2.60, every kind 2.57 and
// 2.57; TestFP8GEMVRate (s28a, back to back): q/k/v mp2 8.83 µs against
// mm2 9.30, gate·up mp2 30.93 against 33.48, o mp4 7.49 against mm4 7.38,
// down mm4 (mp4 does not take K = 14,336) 18.81.
func fp8PersistOn(persist string, kind fp8Kind) bool {
	switch persist {
	case "none":
		return false
	case "gateup":
		return kind == fp8KindGateUp
	}
	return true
}

// fp8PersistTakes reports whether a persistent variant with nb k-steps in
// flight takes x of K columns: every warp of its blocks the same k-steps a
// tile, a multiple of nb.
func fp8PersistTakes(nb, K int) bool { return nb > 0 && K > 0 && K%(1024*nb) == 0 }

// fp8AutoVariant is the FT_FP8_VARIANT value that picks the variant per
// launch (fp8AutoPick) by kind of GEMV and width.
const fp8AutoVariant = "auto"

// fp8DefaultVariant is the FP8 GEMV tuning without FT_FP8_VARIANT: the
// variant picked per launch (fp8AutoPick).
const fp8DefaultVariant = fp8AutoVariant

// fp8FixedDefault is the one variant that ran everywhere before "auto"
// (FT_FP8_VARIANT=u8r1s restores it), and the variant run for a name that
// is not compiled: x widened to fp32 in shared memory, eight 16-byte loads
// per row in flight. Measured on the H200 (2026-12-01, Llama-3-8B FP8
// resident decode at 512, graph replay): u8r1s 3.20 ms a step against
// 3.31 for u8r1g.
const fp8FixedDefault = "u8r1s"

// fp8Kind is which one-token FP8 GEMV a launch runs.
type fp8Kind int

const (
	fp8KindGEMV   fp8Kind = iota // gemv_fp8_v: one weight (o, down; adding into the residual or not)
	fp8KindQKV                   // gemv3_fp8: q, k and v in one launch
	fp8KindGateUp                // gemv_gateup_silu_fp8: gate·up·SiLU in one launch
)

// fp8AutoPick is the variant FT_FP8_VARIANT=auto (the default) runs for a
// GEMV of kind over x of K columns: the tensor-core kernels, mm4 (four
// k-steps in flight) for gemv_fp8_v (o, down), mm2 for q/k/v and gate·up.
// Measured on the H200 (2026-12-04, bench/h200-s25e.sh and s25f,
// TestFP8GEMVRate: µs per launch back to back with dependent launch,
// per-channel scales, Llama-3-8B's shapes; fp8ScalarPick's beside):
//
//	q/k/v   6,144 × 4,096:         mm2 9.39,  mm4 11.00, u4r2s 10.42
//	o       4,096 × 4,096:         mm4 7.29,  mm2 7.79,  u8r1g 8.21
//	down    4,096 × 14,336:        mm4 18.51, mm2 21.45, p4s 20.24
//	gate·up 2 × 14,336 × 4,096:    mm2 31.23, mm4 35.38, u4r1s 33.76
//
// The resident decode graph step at 512: the scalar picks 2.95–2.96 ms
// against mm2 everywhere 2.86–2.87 (s25e); mm2 everywhere 2.84–2.87, mm4
// everywhere 3.00–3.01, mm2 with p4s for down 2.90 (s25f). The tensor-core
// kernels sum in another order than the scalar variants (fp32 on the
// tensor cores): their results are not the scalar bits, within the same
// tolerance of the CPU reference.
func fp8AutoPick(kind fp8Kind, K int) string {
	if kind == fp8KindGEMV {
		return "mm4"
	}
	return "mm2"
}

// fp8ScalarPick is the best scalar variant for a GEMV of kind over K
// columns: what auto runs where the tensor-core variants do not take the
// scales or the device (fp8MMATakes). Measured on the H200 (2026-12-02
// 00:52, bench/h200-s8d.sh, TestFP8GEMVRate as above):
//
//	q/k/v   gemv3_fp8 6,144 × 4,096:       u4r2s 10.33, u16r1s 11.23, u8r1s 11.47
//	o       gemv_fp8_v 4,096 × 4,096:      u8r1g 8.14, u8r2g 8.28, u4r1s 8.37, u8r1s 8.52
//	down    gemv_fp8_v 4,096 × 14,336:     p4s 20.13, u4r1g 22.31, u8r1s 24.85
//	gate·up gemv_gateup_silu_fp8 2 × 14,336 × 4,096: u4r1s 33.72, p4s 34.35, u8r1s 35.13
//
// Every scalar variant gives the same bits (each lane sums its chunks in
// the same order), so the choice among them changes only the time.
func fp8ScalarPick(kind fp8Kind, K int) string {
	switch kind {
	case fp8KindQKV:
		return "u4r2s"
	case fp8KindGateUp:
		return "u4r1s"
	}
	if K >= 8192 {
		return "p4s"
	}
	return "u8r1g"
}

// fp8MMATakes reports whether the tensor-core variants take a layout's
// block size (0 per channel, else B ≥ 64: each 64-column piece of a
// k-step lies in one block) on a device of compute capability cc
// (mma.sync on f16 from 8.0).
func fp8MMATakes(block, cc int) bool { return cc >= 80 && (block == 0 || block >= 64) }

// fp8VariantFor is the variant a launch of kind over K columns runs when
// Backend.FP8Variant is name: fp8AutoPick's for "auto" or "", name itself
// where it is compiled, else fp8FixedDefault.
func fp8VariantFor(name string, kind fp8Kind, K int) string {
	if name == fp8AutoVariant || name == "" {
		return fp8AutoPick(kind, K)
	}
	for _, v := range fp8Variants {
		if v.Name == name {
			return name
		}
	}
	return fp8FixedDefault
}

// FP8VariantNames are the names FT_FP8_VARIANT takes: "auto" (the
// default, a variant per launch) first, then every compiled variant.
func FP8VariantNames() []string {
	names := []string{fp8AutoVariant}
	for _, v := range fp8Variants {
		names = append(names, v.Name)
	}
	return names
}

// fp8VariantFromEnv is the default of Backend.FP8Variant: FT_FP8_VARIANT,
// or fp8DefaultVariant when it is unset or empty.
func fp8VariantFromEnv() (string, error) {
	v := os.Getenv("FT_FP8_VARIANT")
	if v == "" {
		return fp8DefaultVariant, nil
	}
	if slices.Contains(FP8VariantNames(), v) {
		return v, nil
	}
	return "", fmt.Errorf("FT_FP8_VARIANT=%q: want one of %v", v, FP8VariantNames())
}
