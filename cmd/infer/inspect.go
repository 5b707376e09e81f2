package main

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"unicode"

	flextensor "github.com/flextensor-go/flextensor"
	"github.com/flextensor-go/flextensor/loader"
	"github.com/flextensor-go/flextensor/loader/hub"
	"github.com/flextensor-go/flextensor/models"
	"github.com/flextensor-go/flextensor/models/decoder"
	"github.com/flextensor-go/flextensor/nn"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/runtime"
	"github.com/spf13/pflag"
)

func init() {
	register(command{name: "inspect", summary: "describe a checkpoint and what stays resident under a budget", run: inspectCmd,
		define: func(fs *pflag.FlagSet) { inspectFlags(fs) }})
}

const inspectUsage = `
infer inspect reads a checkpoint's config.json and safetensors headers (no
weights) and prints the configuration, the parameter count, bytes by dtype,
each offload unit's bytes and, with --gpu-budget, which units a plan would
keep resident. That plan assumes compute proportional to bytes and a 50 GB/s
copy link; 'infer profile' measures both.

Usage:
  infer inspect [--model DIR] [--gpu-budget X [--device-memory M]] [--json]

Examples:
  infer inspect --model /tmp/llama3-8b --gpu-budget 8GiB
  infer inspect --gpu-budget 1MiB --json
`

type inspectOptions struct {
	model, budget, deviceMemory string
	blocks                      int
	jsonOut                     bool
}

func inspectFlags(fs *pflag.FlagSet) *inspectOptions {
	var o inspectOptions
	fs.StringVar(&o.model, "model", "", "checkpoint directory, or ORG/NAME[@REV] in the Hugging Face cache (see 'infer pull'); default: the bundled tiny model")
	fs.StringVar(&o.budget, "gpu-budget", "", "device memory for weights, bytes (8GiB) or a fraction of --device-memory")
	fs.StringVar(&o.deviceMemory, "device-memory", "", "device memory, for a fractional --gpu-budget")
	fs.IntVar(&o.blocks, "transfer-blocks", 0, "transfer blocks (0 = the planner chooses)")
	fs.BoolVar(&o.jsonOut, "json", false, "print one JSON object")
	return &o
}

type inspectReport struct {
	Family        string `json:"family"`
	Config        any    `json:"config"` // the parsed config, keys in snake_case
	cfg           *decoder.Config
	Parameters    int64            `json:"parameters"`
	BytesByDType  map[string]int64 `json:"bytes_by_dtype"`
	TotalBytes    int64            `json:"total_bytes"`
	FixedBytes    int64            `json:"non_unit_bytes"`
	HostTable     int64            `json:"host_table_bytes"` // of FixedBytes: token embeddings kept in mapped host memory while offloading
	Units         []inspectUnit    `json:"units"`
	Budget        int64            `json:"budget_bytes,omitempty"`
	ResidentUnits int              `json:"resident_units,omitempty"`
	Slots         int              `json:"transfer_blocks,omitempty"`
}

type inspectUnit struct {
	Name     string `json:"name"`
	Bytes    int64  `json:"bytes"`
	Resident *bool  `json:"resident,omitempty"`
}

func inspectCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("inspect", inspectUsage, stderr)
	o := inspectFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	dir, shown := o.model, o.model
	if dir != "" {
		d, err := hub.Resolve(dir) // a directory, or ORG/NAME[@REV] in the Hugging Face cache
		if err != nil {
			return err
		}
		dir = d
	} else {
		d, cleanup, err := flextensor.ExtractTinyLlama()
		if err != nil {
			return err
		}
		defer cleanup()
		dir, shown = d, bundledName
	}
	data, source, err := loader.ReadConfigFile(dir)
	if err != nil {
		return err
	}
	fam, err := models.Lookup(data, source) // the family config.json names
	if err != nil {
		return err
	}
	ck, err := loader.OpenCheckpoint(dir)
	if err != nil {
		return err
	}
	defer ck.Close()
	if err := models.CheckLayers(dir, ck); err != nil { // before building num_hidden_layers layers
		return err
	}
	m, err := fam.New(data, source)
	if err != nil {
		return err
	}
	if err := m.BindCheckpoint(ck, runtime.NewMeta()); err != nil { // shapes only: nothing is read
		return err
	}
	defer m.Close()
	rep := inspectReport{Family: fam.Name, cfg: &m.Cfg, BytesByDType: map[string]int64{}}
	if rep.Config, err = snakeKeys(&m.Cfg); err != nil {
		return err
	}
	for _, p := range nn.Parameters(m) {
		t := p.Peek()
		rep.Parameters += int64(t.NumElements())
		rep.BytesByDType[t.DType().String()] += t.NumBytes()
		rep.TotalBytes += t.NumBytes()
	}
	fp, err := offload.Measure(m, nil, nil)
	if err != nil {
		return err
	}
	rep.FixedBytes, rep.HostTable = fp.FixedBytes, fp.HostTableBytes
	for i, n := range fp.UnitNames {
		rep.Units = append(rep.Units, inspectUnit{Name: n, Bytes: fp.UnitBytes[i]})
	}
	var budgetMin, tableMapped bool // the plan preview's budget is the minimum; the table stays in mapped host memory
	if o.budget != "" {
		b, err := offload.ParseBudget(o.budget)
		if err != nil {
			return usageError{fmt.Errorf("--gpu-budget: %w", err)}
		}
		var limit int64
		if o.deviceMemory != "" {
			lb, err := offload.ParseBudget(o.deviceMemory)
			if err != nil || lb.Bytes == 0 {
				return usagef("--device-memory %q: want bytes with a unit", o.deviceMemory)
			}
			limit = lb.Bytes
		}
		if b.Bytes == 0 && b.Fraction == 0 { // "0": everything streamed, as in run-model and bench
			slots := o.blocks
			if slots == 0 {
				slots = 2
			}
			b = fp.Min(slots)
			o.blocks = slots
		}
		budget, err := b.Resolve(limit)
		if err != nil {
			return usagef("--gpu-budget %s is a fraction of the device: give --device-memory (the device's size) or a budget in bytes", o.budget)
		}
		fixed := fp.FixedBytes
		if budget < fp.TotalBytes { // offloading: the embedding table stays on the host
			fixed -= fp.HostTableBytes
			tableMapped = fp.HostTableBytes > 0
		}
		budgetMin = b.Min
		in := offload.PlanInput{FixedBytes: fixed, Budget: budget, Slots: o.blocks, Curve: offload.FitH2D(10e-6, 50e9)}
		for i, n := range fp.UnitNames {
			in.Units = append(in.Units, offload.PlanUnit{Name: n, Bytes: fp.UnitBytes[i], ComputeSec: float64(fp.UnitBytes[i]) / 4e12})
		}
		plan, err := offload.MakePlan(in)
		if err != nil {
			return err
		}
		rep.Budget, rep.Slots = budget, plan.Slots
		for i := range rep.Units {
			r := plan.Resident[i]
			rep.Units[i].Resident = &r
			if r {
				rep.ResidentUnits++
			}
		}
	}
	if o.jsonOut {
		return json.NewEncoder(stdout).Encode(rep)
	}
	c := m.Cfg
	fmt.Fprintf(stdout, "checkpoint  %s (%d files)\n", shown, len(ck.Files()))
	fmt.Fprintf(stdout, "model       %s: %d layers, hidden %d, MLP %d, heads %d (KV %d) × %d, vocab %d, tied embeddings %v\n",
		fam.Name, c.NumHiddenLayers, c.HiddenSize, c.IntermediateSize, c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim, c.VocabSize, c.TieWordEmbeddings)
	if c.MoE.Enabled() {
		fmt.Fprintf(stdout, "experts     %d of width %d, top %d a token (renormalised %v), dense layers %v\n",
			c.MoE.Experts, c.MoE.IntermediateSize, c.MoE.TopK, c.MoE.NormTopK, c.MoE.DenseLayers)
	}
	fmt.Fprintf(stdout, "rope        %s, theta %g", c.Rope.Type, c.Rope.Theta)
	if c.Rope.Type == "llama3" {
		fmt.Fprintf(stdout, ", factor %g, low/high %g/%g, original %d", c.Rope.Factor, c.Rope.LowFreqFactor, c.Rope.HighFreqFactor, c.Rope.OriginalMaxPositionEmbeddings)
	}
	fmt.Fprintf(stdout, "\nparameters  %d (%.2f B)\n", rep.Parameters, float64(rep.Parameters)/1e9)
	dts := make([]string, 0, len(rep.BytesByDType))
	for d := range rep.BytesByDType {
		dts = append(dts, d)
	}
	sort.Strings(dts)
	for _, d := range dts {
		fmt.Fprintf(stdout, "bytes       %s: %s\n", d, runtime.FormatBytes(rep.BytesByDType[d]))
	}
	fmt.Fprintf(stdout, "non-unit    %s (embeddings, final norm, LM head: on the device)\n", runtime.FormatBytes(rep.FixedBytes))
	if rep.HostTable > 0 {
		fmt.Fprintf(stdout, "            of which %s of token embeddings in mapped host memory when offloading (FT_EMBED_HOST=0: on the device)\n", runtime.FormatBytes(rep.HostTable))
	}
	for _, u := range rep.Units {
		place := ""
		if u.Resident != nil {
			place = "streamed"
			if *u.Resident {
				place = "resident"
			}
		}
		fmt.Fprintf(stdout, "unit        %-24s %12s  %s\n", u.Name, runtime.FormatBytes(u.Bytes), place)
	}
	if o.budget != "" {
		shownBudget := runtime.FormatBytes(rep.Budget)
		if budgetMin {
			shownBudget += " (the minimum)"
		}
		table := ""
		if tableMapped {
			table = fmt.Sprintf(", the %s token embedding table in mapped host memory", runtime.FormatBytes(rep.HostTable))
		}
		fmt.Fprintf(stdout, "budget      %s: %d of %d units resident, %d transfer blocks%s (estimate; 'infer profile' measures)\n",
			shownBudget, rep.ResidentUnits, len(rep.Units), rep.Slots, table)
	}
	return nil
}

// snakeKeys is v as JSON with its object keys in snake_case (HiddenSize →
// hidden_size, RMSNormEps → rms_norm_eps), the case of the rest of
// inspect --json and of config.json.
func snakeKeys(v any) (any, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var x any
	if err := json.Unmarshal(data, &x); err != nil {
		return nil, err
	}
	var walk func(any) any
	walk = func(x any) any {
		switch t := x.(type) {
		case map[string]any:
			out := make(map[string]any, len(t))
			for k, v := range t {
				out[snakeCase(k)] = walk(v)
			}
			return out
		case []any:
			for i := range t {
				t[i] = walk(t[i])
			}
		}
		return x
	}
	return walk(x), nil
}

// snakeCase turns a Go field name into snake_case, keeping acronyms whole.
func snakeCase(s string) string {
	s = strings.ReplaceAll(s, "IDs", "Ids")
	r := []rune(s)
	var b strings.Builder
	for i, c := range r {
		upper := unicode.IsUpper(c)
		if upper && i > 0 {
			prev := r[i-1]
			nextLower := i+1 < len(r) && unicode.IsLower(r[i+1])
			if unicode.IsLower(prev) || unicode.IsDigit(prev) || (unicode.IsUpper(prev) && nextLower) {
				b.WriteByte('_')
			}
		}
		b.WriteRune(unicode.ToLower(c))
	}
	return b.String()
}
