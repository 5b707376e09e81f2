//go:build race

package all_test

// raceEnabled: the race detector slows the CPU kernels tenfold or more;
// TestTrainedFP8Agreement, a measurement, skips under it.
const raceEnabled = true
