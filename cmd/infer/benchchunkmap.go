package main

import (
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/flextensor-go/flextensor/kernels/host"
	"github.com/flextensor-go/flextensor/runtime/hostmem"
)

// bench-host --chunk-map GIB: does the host's read rate depend on where a
// block of memory lands? It maps GIB GiB as the offload engine's pinned
// blocks are mapped on the CPU side (runtime/hostmem, 2 MiB-aligned huge
// pages; FT_PINNED_HUGE=0 as before), then times the STREAM-like read
// (kernels/host's ReadSum, all threads on one chunk at a time) over every
// --chunk-mib chunk of it in --chunk-passes passes, each pass in its own
// shuffled chunk order (fixed seeds). A chunk that is slow in every pass
// while its neighbours are fast points at the memory behind it (a
// hypervisor backing some guest-physical ranges with 4 KiB host pages or
// far memory); with --chunk-fresh N the whole map is freed and mapped
// again N times, showing whether fresh allocations differ as a whole.

// chunkMapOptions are the probe's own flags (bench-host's --threads and
// --level apply too).
type chunkMapOptions struct {
	gib    float64 // --chunk-map: the mapping's size, GiB (fractions allowed); 0: off
	mib    int     // --chunk-mib: one chunk
	passes int     // --chunk-passes
	fresh  int     // --chunk-fresh: allocations
}

func chunkMapFlags(o *chunkMapOptions, fs interface {
	Float64Var(*float64, string, float64, string)
	IntVar(*int, string, int, string)
}) {
	fs.Float64Var(&o.gib, "chunk-map", 0, "map this many GiB (fractions allowed, e.g. 0.25) as the engine's pinned blocks are mapped on the host (runtime/hostmem) and print the STREAM-like read rate of every --chunk-mib chunk of it, pass by pass, and how much chunks differ (0: off)")
	fs.IntVar(&o.mib, "chunk-mib", 256, "--chunk-map: MiB per chunk (the mapping is rounded down to whole chunks)")
	fs.IntVar(&o.passes, "chunk-passes", 3, "--chunk-map: passes over all chunks, each in its own shuffled order (fixed seeds)")
	fs.IntVar(&o.fresh, "chunk-fresh", 1, "--chunk-map: allocations: unmap and map the memory afresh this many times, measuring each")
}

// sizes returns the mapping's size (whole chunks) and one chunk's
// size, or a usage error naming the bad flag.
func (o *chunkMapOptions) sizes() (total, chunk int64, err error) {
	if !(o.gib > 0) || math.IsInf(o.gib, 0) || o.gib > 1<<20 {
		return 0, 0, usagef("--chunk-map %v: want a positive number of GiB (fractions allowed)", o.gib)
	}
	if o.mib < 1 || o.passes < 1 || o.fresh < 1 {
		return 0, 0, usagef("--chunk-mib %d, --chunk-passes %d, --chunk-fresh %d: want each ≥ 1", o.mib, o.passes, o.fresh)
	}
	chunk = int64(o.mib) << 20
	want := int64(o.gib * (1 << 30))
	if want < chunk {
		return 0, 0, usagef("--chunk-map %v (%d MiB) is less than one --chunk-mib %d chunk", o.gib, want>>20, o.mib)
	}
	return want / chunk * chunk, chunk, nil
}

// chunkMapStats summarises a chunk map: Rates[c][p] is chunk c's GB/s in
// pass p.
type chunkMapStats struct {
	Chunks int
	// Min, Median and Max are of the chunk medians (each chunk's median
	// over its passes); Spread is Max/Min.
	Min, Median, Max, Spread float64
	// WithinChunk is the median over chunks of (max pass − min pass) /
	// the chunk's median: how consistent one chunk is from pass to pass.
	WithinChunk float64
	// BetweenChunks is (Max − Min) / Median: how different chunks are
	// from each other, on the same scale as WithinChunk.
	BetweenChunks float64
	// Slow is the number of chunks whose median is below 90% of Median.
	Slow int
}

// summarizeChunkMap computes the stats of rates (chunks × passes); every
// chunk has at least one pass.
func summarizeChunkMap(rates [][]float64) chunkMapStats {
	st := chunkMapStats{Chunks: len(rates)}
	if len(rates) == 0 {
		return st
	}
	meds := make([]float64, len(rates))
	within := make([]float64, len(rates))
	for c, r := range rates {
		meds[c] = medianOf(r)
		if meds[c] > 0 {
			within[c] = (slices.Max(r) - slices.Min(r)) / meds[c]
		}
	}
	st.Min, st.Max, st.Median = slices.Min(meds), slices.Max(meds), medianOf(meds)
	if st.Min > 0 {
		st.Spread = st.Max / st.Min
	}
	if st.Median > 0 {
		st.BetweenChunks = (st.Max - st.Min) / st.Median
	}
	st.WithinChunk = medianOf(within)
	for _, m := range meds {
		if m < 0.9*st.Median {
			st.Slow++
		}
	}
	return st
}

// writeChunkMapSummary prints st's lines.
func writeChunkMapSummary(w io.Writer, st chunkMapStats) {
	fmt.Fprintf(w, "chunk medians over %d chunks: min %.1f / median %.1f / max %.1f GB/s, spread (max/min) %.3f; %d chunk(s) below 90%% of the median\n",
		st.Chunks, st.Min, st.Median, st.Max, st.Spread, st.Slow)
	fmt.Fprintf(w, "within a chunk (median over chunks of (max pass - min pass)/median): %.1f%%; between chunks ((max - min)/median of the chunk medians): %.1f%%\n",
		100*st.WithinChunk, 100*st.BetweenChunks)
}

// benchChunkMap is bench-host --chunk-map.
func benchChunkMap(o *benchHostOptions, level host.Level, stdout io.Writer) error {
	c := &o.chunk
	total, chunk, err := c.sizes()
	if err != nil {
		return err
	}
	e, err := host.NewEngine(host.Options{Threads: o.threads, Level: level})
	if err != nil {
		return err
	}
	defer e.Close()
	huge := hostmem.PinnedHuge()
	nChunks := int(total / chunk)
	fmt.Fprintf(stdout, "chunk map: %d MiB mapped as the engine's pinned blocks (runtime/hostmem, huge %v, THP %q), %d chunks of %d MiB, %d passes (shuffled, fixed seeds), %d allocation(s); STREAM-like read on %d threads (level %v), one chunk at a time\n",
		total>>20, huge, hostmem.THPMode(), nChunks, c.mib, c.passes, c.fresh, e.Threads(), e.Level())
	var allocMedians []float64
	for a := range c.fresh {
		t0 := time.Now()
		blk, buf, err := e.MapReadBuffer(total)
		if err != nil {
			return fmt.Errorf("--chunk-map: allocation %d: %w", a, err)
		}
		mapped := time.Since(t0)
		per := int(chunk / 4)
		e.ReadSum(buf) // warm: every page read once, the pool's threads started
		rates := make([][]float64, nChunks)
		for i := range rates {
			rates[i] = make([]float64, c.passes)
		}
		order := make([]int, nChunks)
		for p := range c.passes {
			for i := range order {
				order[i] = i
			}
			rng := rand.New(rand.NewPCG(uint64(0x5eed), uint64(p)))
			rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
			for _, i := range order {
				s := buf[i*per : (i+1)*per]
				t := time.Now()
				e.ReadSum(s)
				rates[i][p] = float64(chunk) / time.Since(t).Seconds() / 1e9
			}
		}
		cover := hugePagesLine([][]byte{blk.Bytes()})
		collapse := ""
		if blk.CollapseErr != nil {
			collapse = "; MADV_COLLAPSE: " + blk.CollapseErr.Error()
		}
		fmt.Fprintf(stdout, "\nallocation %d: mapped, touched and filled in %.2f s, 2 MiB-aligned %v; %s%s\n", a, mapped.Seconds(), blk.Aligned, cover, collapse)
		fmt.Fprintf(stdout, "%6s %10s  %s %8s  %s\n", "chunk", "offset MiB", passHeader(c.passes), "median", "phys GiB (pagemap, 2 MiB samples)")
		pm := openPhysRanger()
		for i, r := range rates {
			var cells strings.Builder
			for _, v := range r {
				fmt.Fprintf(&cells, " %7.1f", v)
			}
			lo, hi, ok := pm.span(blk.Bytes()[int64(i)*chunk:int64(i+1)*chunk], hostmem.HugePageSize)
			fmt.Fprintf(stdout, "%6d %10d %s %8.1f  %s\n", i, int64(i)*chunk>>20, cells.String(), medianOf(r), physCell(lo, hi, hostmem.HugePageSize, ok))
		}
		pm.close()
		st := summarizeChunkMap(rates)
		writeChunkMapSummary(stdout, st)
		allocMedians = append(allocMedians, st.Median)
		if err := blk.Free(); err != nil {
			return fmt.Errorf("--chunk-map: freeing allocation %d: %w", a, err)
		}
	}
	if c.fresh > 1 {
		fmt.Fprintf(stdout, "\nallocations' median GB/s:")
		for _, m := range allocMedians {
			fmt.Fprintf(stdout, " %.1f", m)
		}
		lo, hi := slices.Min(allocMedians), slices.Max(allocMedians)
		ratio := 0.0
		if lo > 0 {
			ratio = hi / lo
		}
		fmt.Fprintf(stdout, "; max/min %.3f\n", ratio)
	}
	return nil
}

// passHeader is the per-pass column titles, each as wide as a rate cell.
func passHeader(passes int) string {
	var b strings.Builder
	for p := range passes {
		fmt.Fprintf(&b, " %7s", fmt.Sprintf("pass%d", p))
	}
	return b.String()
}
