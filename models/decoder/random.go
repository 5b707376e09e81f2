package decoder

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"

	"github.com/flextensor-go/flextensor/loader"
	"github.com/flextensor-go/flextensor/nn"
	rt "github.com/flextensor-go/flextensor/runtime"
)

// WriteRandomCheckpoint writes a Hugging Face checkpoint of m with random
// weights into dir: BF16, or for the Linears an FP8 model (Config.Quant)
// quantizes, F8_E4M3 codes with their scales (BF16 weight_scale per
// channel, F32 weight_scale_inv per block; see randomFP8): configJSON as config.json (the config m was built
// from), model-0000k-of-0000n.safetensors shards of at most shardBytes, and
// model.safetensors.index.json. Matrices are uniform in ±sqrt(3)·std (std
// 0.02 scaled by 1/sqrt(width/4096) so activations stay in range), norms in
// [0.5, 1.5), biases in ±0.05. The same seed gives the same bytes. It uses
// every core.
func WriteRandomCheckpoint(dir string, m *Model, configJSON []byte, seed uint64, shardBytes int64) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	path := filepath.Join(dir, loader.ConfigFileName)
	if err := os.WriteFile(path, configJSON, 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	shapes := m.ParamShapes()
	var names []string
	for name := range shapes {
		names = append(names, name)
	}
	sort.Strings(names)
	fp8 := m.fp8Params()
	var specs []loader.TensorSpec
	for _, p := range names {
		dt := rt.BF16
		if k, ok := fp8[p]; ok {
			dt = k.dtype
		}
		specs = append(specs, loader.TensorSpec{Name: p, DType: dt, Shape: shapes[p]})
	}
	return loader.WriteShardedFunc(dir, specs, shardBytes, func(i int, dst []byte) error {
		s := specs[i]
		h := fnv.New64a()
		h.Write([]byte(s.Name))
		if k, ok := fp8[s.Name]; ok {
			fillRandomFP8(dst, seed^h.Sum64(), k, s.DType)
			return nil
		}
		kind := randMatrix
		switch {
		case strings.HasSuffix(s.Name, ".bias"):
			kind = randBias
		case len(s.Shape) == 1:
			kind = randNorm
		}
		fillRandomBF16(dst, seed^h.Sum64(), kind, s.Shape)
		return nil
	})
}

const (
	randMatrix = iota
	randNorm
	randBias
)

// fillRandomBF16 fills dst with bf16 values from a splitmix/xorshift stream,
// in 1 MiB chunks spread over the cores.
func fillRandomBF16(dst []byte, seed uint64, kind int, shape []int) {
	scale := float32(0.02 * 1.7320508)
	if kind == randMatrix && len(shape) == 2 && shape[1] > 0 {
		if w := float32(shape[1]) / 4096; w > 0 {
			scale /= sqrt32(w)
		}
	}
	fillUniform(dst, seed, 2, func(i int, u float32) {
		var v float32
		switch kind {
		case randNorm:
			v = 1 + u/2
		case randBias:
			v = u * 0.05
		default:
			v = u * scale
		}
		binary.LittleEndian.PutUint16(dst[i:], rt.F32ToBF16(v))
	})
}

// fillUniform calls put(i, u) for each element at byte offset i of dst
// (elements of step bytes), u uniform in [-1, 1) from a xorshift generator
// seeded per 1 MiB chunk (so the values do not depend on the number of
// workers), the chunks spread over the CPUs.
func fillUniform(dst []byte, seed uint64, step int, put func(i int, u float32)) {
	const chunk = 1 << 20
	n := (len(dst) + chunk - 1) / chunk
	workers := min(runtime.GOMAXPROCS(0), n)
	var wg sync.WaitGroup
	next := make(chan int, n)
	for c := 0; c < n; c++ {
		next <- c
	}
	close(next)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range next {
				lo, hi := c*chunk, min((c+1)*chunk, len(dst))
				x := seed ^ (uint64(c)+1)*0x9e3779b97f4a7c15
				for i := lo; i+step <= hi; i += step {
					x ^= x << 13
					x ^= x >> 7
					x ^= x << 17
					put(i, float32(x>>40)/float32(1<<24)*2-1)
				}
			}
		}()
	}
	wg.Wait()
}

func sqrt32(x float32) float32 {
	r := x
	for i := 0; i < 20; i++ {
		r = (r + x/r) / 2
	}
	return r
}

// fp8Param is how a random FP8 model's weight or scale tensor is filled.
type fp8Param struct {
	dtype rt.DType
	scale bool // the scales (else the codes)
	in    int  // the Linear's input width (the scales' magnitude)
}

// fp8Params lists the tensors of m's FP8 Linears: weights (F8_E4M3) and
// scales (BF16 for compressed-tensors' weight_scale, F32 for the block
// layout's weight_scale_inv).
func (m *Model) fp8Params() map[string]fp8Param {
	out := map[string]fp8Param{}
	for _, mod := range nn.Modules(m) {
		l, ok := mod.(*nn.Linear)
		if !ok || l.Scale == nil {
			continue
		}
		out[l.Weight.Name()] = fp8Param{dtype: rt.F8E4M3, in: l.In}
		sdt := rt.BF16
		if l.FP8.Block > 0 {
			sdt = rt.F32
		}
		out[l.Scale.Name()] = fp8Param{dtype: sdt, scale: true, in: l.In}
	}
	return out
}

// fillRandomFP8 fills an FP8 model's tensor: codes E4M3(u·448) for u uniform
// in [-1, 1), and scales (BF16 or F32) of the BF16 matrices' bound
// sqrt(3)·std/448 jittered by ±25%, so that the dequantized weights are
// distributed like WriteRandomCheckpoint's BF16 ones. Codes and scales are
// drawn independently: neither needs the other's bytes.
func fillRandomFP8(dst []byte, seed uint64, k fp8Param, dt rt.DType) {
	bound := float32(0.02 * 1.7320508)
	if w := float32(k.in) / 4096; w > 0 {
		bound /= sqrt32(w)
	}
	base := bound / rt.F8E4M3Max
	fillUniform(dst, seed, dt.Size(), func(i int, u float32) {
		switch {
		case !k.scale:
			dst[i] = rt.F32ToF8E4M3(u * rt.F8E4M3Max)
		case dt == rt.F32:
			binary.LittleEndian.PutUint32(dst[i:], math.Float32bits(base*(1+u/4)))
		default:
			binary.LittleEndian.PutUint16(dst[i:], rt.F32ToBF16(base*(1+u/4)))
		}
	})
}
