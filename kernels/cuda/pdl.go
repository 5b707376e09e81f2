package cuda

import (
	_ "embed"
	"sort"
	"strings"
)

// Programmatic dependent launch: a kernel launched with it may start while
// the kernel ahead of it in the stream still runs, so it must call
// ft_pdl_wait (common.cuh) before it touches memory that kernel may write.
// dependent_launch.txt lists every kernel of every unit (Source,
// SourceDecodeLayer, SourceSM90a and its extras) whose device code reaches
// ft_pdl_wait, one name a line: the kernels a backend may launch that way
// and no others. It is not written by hand: TestDependentLaunchList
// compiles each unit's device code with clang and fails when the file
// differs from what the code says (FT_UPDATE_PDL=1 rewrites it), so a
// kernel that starts calling ft_pdl_wait, or stops, changes the list in
// the same commit.

//go:embed dependent_launch.txt
var dependentLaunchFile string

// dependentLaunch is dependent_launch.txt as a set.
var dependentLaunch = func() map[string]bool {
	m := map[string]bool{}
	for _, line := range strings.Split(dependentLaunchFile, "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			m[line] = true
		}
	}
	return m
}()

// WaitsForDependentLaunch reports whether the kernel of that name calls
// ft_pdl_wait (dependent_launch.txt): only such a kernel may be launched
// with programmatic dependent launch.
func WaitsForDependentLaunch(name string) bool { return dependentLaunch[name] }

// DependentLaunchKernels lists the kernels of dependent_launch.txt, sorted.
func DependentLaunchKernels() []string {
	out := make([]string, 0, len(dependentLaunch))
	for k := range dependentLaunch {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
