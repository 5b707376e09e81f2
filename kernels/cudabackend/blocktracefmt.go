package cudabackend

import (
	"encoding/binary"
	"fmt"
	"io"
	"slices"
)

// blockTraceBytes is the size of one block record: eight little-endian
// words (common.cuh's layout).
const blockTraceBytes = 64

// traceMarks is the number of FT_TRACE_MARK points a record holds.
const traceMarks = 4

// traceGrid is one launch's blocks in the trace.
type traceGrid struct {
	id, blocks, seen                    int
	start, waitLo, waitMed, endMed, end uint64 // ns; wait 0: no block waited
	sms                                 map[int]bool
	marks                               [traceMarks][]uint64 // each mark's absolute times (ns), blocks that passed it
}

// writeBlockTrace writes the summary BlockTraceWrite describes of the raw
// records (blockTraceBytes each).
func writeBlockTrace(w io.Writer, label string, names []string, raw []byte, lost uint64) error {
	word := func(r, i int) uint64 { return binary.LittleEndian.Uint64(raw[blockTraceBytes*r+8*i:]) }
	grids := map[uint64]*traceGrid{}
	waits := map[uint64][]uint64{}
	ends := map[uint64][]uint64{}
	var t0 uint64
	for r := 0; r < len(raw)/blockTraceBytes; r++ {
		key, start, wait, end := word(r, 1), word(r, 2), word(r, 3), word(r, 4)
		g := grids[key]
		if g == nil {
			g = &traceGrid{id: int(word(r, 0) & 0xffff), blocks: int(word(r, 5)), start: start, sms: map[int]bool{}}
			grids[key] = g
		}
		for k := range traceMarks {
			if m := word(r, 6+k/2) >> (32 * (k % 2)) & 0xffffffff; m != 0 {
				g.marks[k] = append(g.marks[k], start+m)
			}
		}
		g.seen++
		g.sms[int(word(r, 0)>>16&0xffff)] = true
		g.start = min(g.start, start)
		g.end = max(g.end, end)
		if wait != 0 {
			waits[key] = append(waits[key], wait)
		}
		ends[key] = append(ends[key], end)
		if t0 == 0 || start < t0 {
			t0 = start
		}
	}
	med := func(v []uint64) uint64 {
		if len(v) == 0 {
			return 0
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	order := make([]*traceGrid, 0, len(grids))
	for key, g := range grids {
		if w := waits[key]; len(w) > 0 {
			g.waitMed = med(w)
			g.waitLo = w[0]
		}
		g.endMed = med(ends[key])
		order = append(order, g)
	}
	slices.SortFunc(order, func(a, b *traceGrid) int {
		if a.start != b.start {
			if a.start < b.start {
				return -1
			}
			return 1
		}
		return a.id - b.id
	})
	us := func(t uint64) float64 {
		if t == 0 {
			return -1
		}
		return float64(t-t0) / 1e3
	}
	if _, err := fmt.Fprintf(w, "# %s: %d launches, %d block records (%d lost); µs: start waitLo waitMed endMed end blocks/grid sms kernel [mK median/latest: FT_TRACE_MARK(K)]\n",
		label, len(order), len(raw)/blockTraceBytes, lost); err != nil {
		return err
	}
	type crit struct {
		n  int
		ns uint64
	}
	byName := map[string]*crit{}
	var kinds []string
	latest := t0
	for _, g := range order {
		name := fmt.Sprintf("kernel#%d", g.id)
		if g.id < len(names) {
			name = names[g.id]
		}
		marks := ""
		for k, m := range g.marks {
			if len(m) > 0 {
				marks += fmt.Sprintf(" m%d %.2f/%.2f", k, us(med(m)), us(slices.Max(m)))
			}
		}
		if _, err := fmt.Fprintf(w, "%9.2f %9.2f %9.2f %9.2f %9.2f %5d/%-5d %3d %s%s\n", us(g.start), us(g.waitLo), us(g.waitMed),
			us(g.endMed), us(g.end), g.seen, g.blocks, len(g.sms), name, marks); err != nil {
			return err
		}
		c := byName[name]
		if c == nil {
			c = &crit{}
			byName[name] = c
			kinds = append(kinds, name)
		}
		c.n++
		if g.end > latest {
			c.ns += g.end - latest
			latest = g.end
		}
	}
	// The critical path: how far each launch moved the latest end so far.
	if _, err := fmt.Fprintf(w, "# critical path by kernel (µs the last block end moved past every earlier one): launches total mean kernel\n"); err != nil {
		return err
	}
	for _, name := range kinds {
		c := byName[name]
		if _, err := fmt.Fprintf(w, "# %5d %9.2f %7.2f %s\n", c.n, float64(c.ns)/1e3, float64(c.ns)/1e3/float64(c.n), name); err != nil {
			return err
		}
	}
	return nil
}
