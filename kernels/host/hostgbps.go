package host

import (
	"fmt"
	"os"
	"strconv"
)

// HostGBpsEnv names the A/B switch that fixes the host GEMV rate the
// offload planner starts from: FT_HOST_GBPS=N makes the backend report N
// GB/s (offload.HostBandwidthMeasurer) instead of the engine timing one
// token through the largest unit's matrices at start-up, a figure that
// varied 88–98 GB/s between runs on the H200 machine (bench/RESULTS.md)
// and picked different first plans. With it set, the planner's host
// estimate is N alone: it also replaces the larger of the GEMV figure and
// FT_HOST_DRAM_GBPS's DRAM read figure that the estimate otherwise is
// (the DRAM figure still feeds the model of host units sharing reads with
// the copies). Unset or 0: measured (the default). The replan on measured
// host times (offload's host_measure.go) follows either way.
const HostGBpsEnv = "FT_HOST_GBPS"

// hostGBpsFromEnv parses FT_HOST_GBPS into bytes a second (0: unset).
func hostGBpsFromEnv() (float64, error) {
	v := os.Getenv(HostGBpsEnv)
	if v == "" {
		return 0, nil
	}
	g, err := strconv.ParseFloat(v, 64)
	if err != nil || !(g >= 0) || g > 1e6 { // NaN and ±Inf too
		return 0, fmt.Errorf("host: %s=%q: want GB/s, a number from 0 (measure) to 1e6", HostGBpsEnv, v)
	}
	return g * 1e9, nil
}

// HostBandwidth is the host GEMV rate FT_HOST_GBPS fixes, bytes a second;
// 0 (unset) leaves the offload engine to measure it.
func (b *Backend) HostBandwidth() float64 { return b.gbps }
