package cudabackend

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
)

// The start-up check of the backend's simple A/B switches: variables its
// readers compare with one value (FT_FLASH == "legacy", FT_FUSE_NORM ==
// "1", …), so that a typo would silently give the default path. New
// rejects any value outside the list here, naming the variable and the
// values it takes. No build tag: the check is tested in every build, and
// the command line's own lists are tested against it (EnvSwitchValues).
// Switches with their own parsers (FT_GEMV, FT_FP8_VARIANT, FT_FP8_GEMM,
// FT_FP8_ADD, FT_GEMM, FT_FUSE_ROPE, FT_NORM_ROWS, FT_MERGED_GEMM,
// FT_PREFILL_RESACC) are not listed; they fail in New the same way.

// envSwitches are the switches checkEnvSwitches checks, each with the
// values it takes, "" (unset) first; nil: a non-negative integer.
var envSwitches = map[string][]string{
	"FT_DECODE_ATTN":         {"", "legacy"},
	"FT_FUSE_ADDNORM":        {"", "0", "1"},
	"FT_FLASH":               {"", "legacy"},
	"FT_FP8_GEMV":            {"", "legacy"},
	"FT_DECODE_PIPE":         {"", "0", "1"},
	"FT_DECODE_MEGA":         {"", "0", "1"},
	"FT_FP8_GEMM_SCALES":     {"", "rescale"},
	"FT_FP8_FUSE":            {"", "0", "1"},
	"FT_FUSE_NORM":           {"", "0", "1"},
	"FT_FP8_FUSE_NORM":       {"", "0", "1"},
	"FT_FP8_PERSIST":         {"", "all", "gateup", "none"},
	"FT_GEMV_EARLY":          {"", "0", "1"},
	"FT_NORM_TAIL":           {"", "0", "1"},
	"FT_QKNORM_ROPE":         {"", "0", "1", "all"},
	"FT_VARLEN_CONTIG":       {"", "0", "1"},
	"FT_SWIGLU_GEMM":         {"", "0", "1", "regs", "tma"},
	"FT_QKV_GEMM":            {"", "0", "1"},
	"FT_TRACE":               {"", "0", "1"},
	"FT_ASYNC_DECODE":        {"", "0", "1"},
	"FT_DECODE_CLUSTER":      {"", "0", "1", "2", "4", "8"},
	"FT_DECODE_CLUSTER_PUSH": {"", "0", "1"},
	"FT_PREFILL_VARIANT":     append([]string{""}, prefillVariantNames()...),
	"FT_DECODE_SPLIT":        nil,
	"FT_DECODE_CHUNK":        nil,
	"FT_DECODE_SPLITS":       nil,
	"FT_FUSED_GROUP":         nil,
}

// EnvSwitchValues are the simple switches New checks at start-up, each with
// the values it takes ("" first; nil: a non-negative integer), a copy.
func EnvSwitchValues() map[string][]string {
	m := make(map[string][]string, len(envSwitches))
	for k, v := range envSwitches {
		m[k] = slices.Clone(v)
	}
	return m
}

// checkEnvSwitch checks the value of one switch of envSwitches.
func checkEnvSwitch(name, value string) error {
	values, ok := envSwitches[name]
	switch {
	case !ok:
		return fmt.Errorf("%s is not a switch of the CUDA backend", name)
	case values == nil:
		if n, err := strconv.Atoi(value); value != "" && (err != nil || n < 0) {
			return fmt.Errorf("%s=%q: want a non-negative integer (or unset)", name, value)
		}
	case !slices.Contains(values, value):
		return fmt.Errorf("%s=%q: want one of %s (or unset)", name, value, quoteValues(values[1:]))
	}
	return nil
}

// checkEnvSwitches checks every switch of envSwitches in the environment,
// all the bad ones in one error.
func checkEnvSwitches() error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(envSwitches)) {
		errs = append(errs, checkEnvSwitch(name, os.Getenv(name)))
	}
	return errors.Join(errs...)
}
