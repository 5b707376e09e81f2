package host

import (
	"fmt"
	"os"
)

// AffinityEnv names the A/B switch that pins the pool's helpers to CPUs:
// FT_HOST_AFFINITY=1 locks helper w (1 … Threads−1) to its own OS thread
// and that thread to the w-th CPU the process may run on (counting from
// 0, modulo their number), so that the scheduler never moves a helper off
// the weights' core mid-job nor stacks two on one core. The caller of a
// Run (worker 0, the goroutine that also drives the GPU in a hybrid
// forward) stays free. Unset or 0: no pinning (the default).
const AffinityEnv = "FT_HOST_AFFINITY"

// affinityFromEnv parses FT_HOST_AFFINITY.
func affinityFromEnv() (bool, error) {
	switch v := os.Getenv(AffinityEnv); v {
	case "", "0":
		return false, nil
	case "1":
		return true, nil
	default:
		return false, fmt.Errorf("host: %s=%q: want 1 (pin the pool's workers to CPUs) or 0", AffinityEnv, v)
	}
}

// pinPlan returns the CPU each helper 1 … threads−1 is pinned to (index 0
// unused: the caller is not pinned) from the CPUs the process may use.
func pinPlan(threads int, cpus []int) []int {
	plan := make([]int, threads)
	for w := 1; w < threads; w++ {
		plan[w] = cpus[w%len(cpus)]
	}
	return plan
}
