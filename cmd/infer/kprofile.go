package main

import (
	"errors"
	"fmt"
	"io"
	"sort"

	"github.com/flextensor-go/flextensor/runtime"
)

// kernelProfiler is bench --kernel-profile: one extra, unmeasured forward
// run with every kernel timed between events, printed as a table per kernel
// name (launches, time, bytes, achieved GB/s).
type kernelProfiler struct {
	w     io.Writer
	dev   runtime.Device
	title string
}

// profile runs fn with the device's kernel profile on and prints the table.
// A device that cannot time kernels (the CPU) is an error that says so.
func (k *kernelProfiler) profile(title string, fn func() error) error {
	kp, ok := k.dev.(runtime.KernelProfiler)
	if !ok {
		return fmt.Errorf("--kernel-profile: the %s device cannot time kernels (a CUDA device can)", k.dev.Name())
	}
	if err := kp.StartKernelProfile(); err != nil {
		return err
	}
	ferr := fn()
	recs, err := kp.StopKernelProfile()
	if err = errors.Join(ferr, err); err != nil {
		return err
	}
	printKernelTable(k.w, title, recs)
	return nil
}

// printKernelTable prints recs grouped by kernel name, longest total first.
func printKernelTable(w io.Writer, title string, recs []runtime.KernelRecord) {
	type row struct {
		name  string
		calls int
		ms    float64
		bytes int64
	}
	byName := map[string]*row{}
	var rows []*row
	var totalMs float64
	var totalBytes int64
	for _, r := range recs {
		x := byName[r.Name]
		if x == nil {
			x = &row{name: r.Name}
			byName[r.Name] = x
			rows = append(rows, x)
		}
		x.calls++
		x.ms += r.Ms
		x.bytes += r.Bytes
		totalMs += r.Ms
		totalBytes += r.Bytes
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].ms > rows[j].ms })
	fmt.Fprintf(w, "kernel profile: %s: %d launches, %.3f ms of kernels, %s moved by those that say\n", title, len(recs), totalMs, runtime.FormatBytes(totalBytes))
	fmt.Fprintf(w, "%-40s %7s %10s %7s %12s %9s\n", "kernel", "calls", "ms", "share", "bytes", "GB/s")
	for _, r := range rows {
		bw, bytes := "-", "-"
		if r.bytes > 0 {
			bytes = runtime.FormatBytes(r.bytes)
			if r.ms > 0 {
				bw = fmt.Sprintf("%.0f", float64(r.bytes)/(r.ms/1e3)/1e9)
			}
		}
		share := 0.0
		if totalMs > 0 {
			share = 100 * r.ms / totalMs
		}
		fmt.Fprintf(w, "%-40s %7d %10.3f %6.1f%% %12s %9s\n", r.name, r.calls, r.ms, share, bytes, bw)
	}
}
