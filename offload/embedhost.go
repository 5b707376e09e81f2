package offload

import (
	"fmt"
	"os"
	goruntime "runtime"
	"slices"
	"time"

	"github.com/flextensor-go/flextensor/nn"
	"github.com/flextensor-go/flextensor/runtime"
)

// FT_EMBED_HOST (read when a model is measured or offloaded: unset or "1"
// on, "0" off, anything else an error naming it): while the engine
// offloads, gather-only embedding tables stay in page-locked host memory
// mapped into the device (runtime.MappedHostDevice) instead of taking device
// memory. A decode step gathers one row (8 KB for Llama 3 8B) of a table
// that takes 1.05 GB on the device, about 2.4 of its 416 MiB layers' worth
// of the budget; the embedding kernel reads the row across the bus through
// the mapped address (in CUDA graphs too). FT_EMBED_HOST=0 uploads them as
// before (A/B).

// embedHostOverride, when not nil, replaces FT_EMBED_HOST (tests).
var embedHostOverride *bool

// embedHostOn reads FT_EMBED_HOST.
func embedHostOn() (bool, error) {
	if embedHostOverride != nil {
		return *embedHostOverride, nil
	}
	return envSwitch("FT_EMBED_HOST")
}

// envSwitch reads an on-by-default switch: unset, "" or "1" on, "0" off,
// anything else an error naming the variable.
func envSwitch(name string) (bool, error) {
	switch v := os.Getenv(name); v {
	case "", "1":
		return true, nil
	case "0":
		return false, nil
	default:
		return false, fmt.Errorf("offload: %s=%q: want 0 (off) or 1 (on, the default)", name, v)
	}
}

// hostTable is one gather-only table the engine keeps in mapped host memory.
type hostTable struct {
	name  string
	bytes int64 // its bytes in host memory
}

// deviceTable is an embedding table the engine left on the device while
// offloading was considered: why, and whether Footprint.HostTableBytes
// counted it as off the device (a gather-only table with FT_EMBED_HOST on,
// which a Min budget then adds back).
type deviceTable struct {
	name    string
	bytes   int64 // its aligned device bytes
	why     string
	counted bool
}

// unmappedBytes is the bytes of the tables Footprint.HostTableBytes counts
// as in host memory that the engine put on the device.
func (e *engine) unmappedBytes() int64 {
	var n int64
	for _, t := range e.devTables {
		if t.counted {
			n += t.bytes
		}
	}
	return n
}

// budgetBytes resolves the configured budget for the device; a Min budget
// (the model's minimum) gets the bytes of the tables it counted as in
// mapped host memory that are on the device back.
func (e *engine) budgetBytes() (int64, error) {
	b, err := e.cfg.GPUBudget.Resolve(DeviceCapacity(e.dev))
	if err != nil || b <= 0 || !e.cfg.GPUBudget.Min {
		return b, err
	}
	return b + e.unmappedBytes() + e.packedSlotsBytes(), nil
}

// gatherOnly reports whether p is the weight of an nn.Embedding that no
// other module of model shares (a tied LM head reads the whole table every
// token: that one stays on the device).
func gatherOnly(model nn.Module, p *nn.Parameter) (ok bool, sharer string) {
	emb, isEmb := p.Owner().(*nn.Embedding)
	if !isEmb || emb.Weight != p {
		return false, ""
	}
	for _, m := range nn.Modules(model) {
		if m == p.Owner() {
			continue
		}
		for _, q := range m.Node().Params() {
			if q == p {
				return false, m.Node().Name()
			}
		}
	}
	return true, ""
}

// hostTableBytes is the device bytes an offloading engine saves by keeping
// non-unit parameter p in mapped host memory: its aligned size when it is a
// gather-only table and FT_EMBED_HOST is on (on), else 0 (Footprint).
func hostTableBytes(model nn.Module, p *nn.Parameter, on bool) int64 {
	if ok, _ := gatherOnly(model, p); !ok || !on || p.Peek() == nil {
		return 0
	}
	return alignUp(p.Peek().NumBytes())
}

// offloading reports whether the engine's weights exceed its device budget
// (the budget startInference plans under: the configured one, else the
// device's capacity, cut to the free memory of a device with a limit), and
// the bytes that decided it; an engine started from a profile offloads when
// the profile's plan keeps a unit off the device. With no budget and no
// known capacity everything may stay: no offload.
func (e *engine) offloading() (bool, int64, int64) {
	if e.planned != nil { // from a profile: its plan says
		return slices.Contains(e.planned, false), 0, 0
	}
	budget, err := e.budgetBytes()
	if err != nil || budget <= 0 {
		return false, 0, 0 // startInference reports a bad budget
	}
	if mem := e.dev.Memory(); mem.Limit > 0 {
		budget = min(budget, mem.Limit-mem.InUse)
	}
	var total int64
	for _, t := range e.fixedOrig {
		total = alignUp(total + t.NumBytes())
	}
	for _, u := range e.units {
		total += u.bytes
	}
	return total > budget, total, budget
}

// chooseHostTables picks the gather-only embedding tables among the
// non-unit parameters that go to mapped host memory: when the engine
// offloads, the device can map host memory and FT_EMBED_HOST is not 0. It
// records them in e.hostPending (uploadFixed skips them; placeHostTables
// places them after the units' host blocks are packed, so that the blocks
// the host cores read take their pages first). With a Trace (FT_TRACE=1) a
// table left on the device gets a line saying why.
func (e *engine) chooseHostTables() {
	e.hostPending, e.devTables = nil, nil
	var cands []int
	for i, p := range e.fixed {
		if _, isEmb := p.Owner().(*nn.Embedding); isEmb && e.fixedOrig[i].Device() != e.dev {
			cands = append(cands, i)
		}
	}
	if len(cands) == 0 {
		return
	}
	_, canMap := e.dev.(runtime.MappedHostDevice)
	off, total, budget := e.offloading()
	for _, i := range cands {
		p := e.fixed[i]
		why := ""
		ok, sharer := gatherOnly(e.model, p)
		if !ok {
			why = "shared with " + sharer + ", which reads all of it"
		}
		switch {
		case why != "":
		case !e.embedHost:
			why = "FT_EMBED_HOST=0"
		case !off && e.planned != nil:
			why = "the profile's plan keeps every unit on the device"
		case !off:
			why = fmt.Sprintf("the weights (%s) fit the budget (%s)", runtime.FormatBytes(total), runtime.FormatBytes(budget))
		case !canMap:
			why = e.dev.Name() + " cannot map host memory"
		}
		if why != "" {
			e.devTables = append(e.devTables, deviceTable{name: p.Name(), bytes: alignUp(e.fixedOrig[i].NumBytes()), why: why, counted: ok && e.embedHost})
			e.trace(fmt.Sprintf("embedding %s (%s) on the device: %s", p.Name(), runtime.FormatBytes(e.fixedOrig[i].NumBytes()), why), 0)
			continue
		}
		if e.hostPending == nil {
			e.hostPending = map[*nn.Parameter]int{}
		}
		e.hostPending[p] = i
	}
}

// placeHostTables puts the tables chooseHostTables picked into mapped host
// memory and binds them there. Their bytes are not fixed bytes: the planner
// gets their room. With a Trace each gets a line with the bytes it freed. A
// table the device fails to map is uploaded to the device instead (a trace
// line says why).
func (e *engine) placeHostTables() error {
	md, _ := e.dev.(runtime.MappedHostDevice)
	for _, i := range sortedIndexes(e.hostPending) {
		p, orig := e.fixed[i], e.fixedOrig[i]
		n := orig.NumBytes()
		t0 := time.Now()
		buf, host, err := md.AllocMapped(n, "offload host-mapped "+p.Name())
		if err != nil {
			// The device could not map it (a driver or context without
			// mapped pinned memory): the table goes to the device as before.
			delete(e.hostPending, p)
			why := fmt.Sprintf("mapping it failed: %v", err)
			e.devTables = append(e.devTables, deviceTable{name: p.Name(), bytes: alignUp(n), why: why, counted: true})
			e.trace(fmt.Sprintf("embedding %s (%s) on the device: %s", p.Name(), runtime.FormatBytes(n), why), time.Since(t0))
			if err := e.uploadParams([]*nn.Parameter{p}, []*runtime.Tensor{orig}, "offload resident parameters"); err != nil {
				return err
			}
			e.st.freeStaging()
			continue
		}
		if err := e.fillHost(p, orig, host); err != nil {
			buf.Free()
			return err
		}
		v, err := runtime.TensorOn(buf, 0, orig.DType(), orig.Shape())
		if err == nil {
			err = p.Bind(v)
		}
		if err != nil {
			buf.Free()
			return err
		}
		e.fixedBufs = append(e.fixedBufs, buf) // freed with the engine's buffers
		e.hostTables = append(e.hostTables, hostTable{name: p.Name(), bytes: n})
		delete(e.hostPending, p)
		e.placed(n)
		e.trace(fmt.Sprintf("embedding %s in mapped host memory: %s off the device budget", p.Name(), runtime.FormatBytes(alignUp(n))), time.Since(t0))
	}
	return nil
}

// sortedIndexes is m's values in increasing order.
func sortedIndexes(m map[*nn.Parameter]int) []int {
	out := make([]int, 0, len(m))
	for _, i := range m {
		out = append(out, i)
	}
	slices.Sort(out)
	return out
}

// fillHost reads parameter p into host, in 64 MiB pieces on several
// goroutines (a 1 GB table from the page cache or the checkpoint file).
func (e *engine) fillHost(p *nn.Parameter, orig *runtime.Tensor, host []byte) error {
	workers := min(8, max(1, goruntime.GOMAXPROCS(0)))
	return inPieces(int64(len(host)), 64<<20, workers, func(lo, hi int64) error {
		if err := e.st.read(p, orig, lo, host[lo:hi]); err != nil {
			return fmt.Errorf("embedding %s to host-mapped memory: %w", p.Name(), err)
		}
		return nil
	})
}

// hostMappedBytes is the bytes of the tables placed in mapped host memory.
func (e *engine) hostMappedBytes() int64 {
	var n int64
	for _, t := range e.hostTables {
		n += t.bytes
	}
	return n
}

// HostMappedParams lists the parameters the named manager's engine keeps in
// page-locked host memory mapped into the device (gather-only embedding
// tables while offloading; FT_EMBED_HOST=0 turns it off): the device's
// kernels read them in place, and they count in neither the budget nor
// GPUMemoryUsage's resident bytes (HostMappedBytes).
func HostMappedParams(name string) []string { return GetOffloadManager(name).HostMappedParams() }

// HostMappedParams is the package function HostMappedParams for this manager.
func (m *Manager) HostMappedParams() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	if m.e == nil {
		return out
	}
	for _, t := range m.e.hostTables {
		out = append(out, t.name)
	}
	return out
}
