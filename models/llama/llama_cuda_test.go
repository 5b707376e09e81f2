//go:build cuda

package llama

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/x448/float16"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/kernels/cudabackend"
	"github.com/flextensor-go/flextensor/loader"
	"github.com/flextensor-go/flextensor/runtime"
	"github.com/flextensor-go/flextensor/runtime/cuda"
)

// The golden-logits, greedy and KV-cache tests run on the GPU through
// devtest.Each in llama_test.go; this file keeps the GPU-only ones.

// loadTinyCUDA loads a checkpoint on a GPU 0 device of its own with the CUDA
// backend; a cleanup closes the device, failing the test on a leak.
func loadTinyCUDA(t *testing.T, dir string) (*Model, kernels.Backend) {
	t.Helper()
	dev, err := cuda.Open(0)
	if err != nil {
		t.Skipf("no GPU: %v", err)
	}
	b, err := cudabackend.New(dev)
	if err != nil {
		dev.Close()
		t.Fatal(err)
	}
	m, ck, err := Load(dir, dev)
	if err != nil {
		dev.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		m.Close()
		ck.Close()
		if err := dev.Close(); err != nil {
			t.Errorf("device close: %v", err)
		}
	})
	return m, b
}

// TestDecodeGraphCUDA: replaying the captured step gives exactly the logits
// of the eager step, position after position.
func TestDecodeGraphCUDA(t *testing.T) {
	ref := readReference(t)
	m, b := loadTinyCUDA(t, tinyDir)
	prompt := ref.InputIDs[0]
	caches := make([]*KVCache, 2)
	for i := range caches {
		c, err := m.NewKVCache(b, len(prompt)+16)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Free()
		if _, err := m.Forward(b, c, prompt, false); err != nil {
			t.Fatal(err)
		}
		caches[i] = c
	}
	g, err := m.CaptureDecode(b, caches[1])
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	V := m.Cfg.VocabSize
	eager, replay := make([]float32, V), make([]float32, V)
	for i, id := range ref.GreedyContinuation[:12] {
		lt, err := m.Forward(b, caches[0], []int32{id}, false)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.ReadF32(eager, lt); err != nil {
			t.Fatal(err)
		}
		lg, err := g.Step(id)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.ReadF32(replay, lg); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(eager, replay) {
			worst := 0.0
			for j := range eager {
				worst = math.Max(worst, math.Abs(float64(eager[j]-replay[j])))
			}
			t.Fatalf("step %d: graph logits differ from eager ones by up to %.3g", i, worst)
		}
	}
	if caches[0].Len() != caches[1].Len() {
		t.Fatalf("cache lengths %d and %d", caches[0].Len(), caches[1].Len())
	}
	// A larger forward reallocates the workspace: the graph must refuse.
	big, err := m.NewKVCache(b, 64)
	if err != nil {
		t.Fatal(err)
	}
	defer big.Free()
	if _, err := m.Forward(b, big, make([]int32, 40), false); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Step(1); err == nil || !strings.Contains(err.Error(), "workspace changed") {
		t.Fatalf("step after the workspace grew: %v", err)
	}
}

// TestWeightDTypeCUDA: a checkpoint whose weights the CUDA kernels cannot
// take (F16, F32) loads but gives a clear error at its first forward.
func TestWeightDTypeCUDA(t *testing.T) {
	for _, dt := range []runtime.DType{runtime.F16, runtime.F32} {
		dir := copyCheckpoint(t, func(cfg map[string]any, ts []loader.NamedTensor) []loader.NamedTensor {
			for i := range ts {
				if ts[i].DType != runtime.BF16 {
					continue
				}
				vals := make([]float32, len(ts[i].Data)/2)
				kernels.BF16ToF32(vals, runtime.BytesAsU16(ts[i].Data))
				out := make([]byte, len(vals)*dt.Size())
				for j, v := range vals {
					if dt == runtime.F16 {
						h := float16.Fromfloat32(v).Bits()
						out[2*j], out[2*j+1] = byte(h), byte(h>>8)
					} else {
						u := math.Float32bits(v)
						out[4*j], out[4*j+1], out[4*j+2], out[4*j+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
					}
				}
				ts[i].DType, ts[i].Data = dt, out
			}
			cfg["dtype"] = strings.ToLower(map[runtime.DType]string{runtime.F16: "float16", runtime.F32: "float32"}[dt])
			return ts
		})
		m, b := loadTinyCUDA(t, dir)
		_, err := m.Generate(b, []int32{1, 2, 3}, GenerateOptions{MaxNewTokens: 1})
		if err == nil || !strings.Contains(err.Error(), dt.String()) || !strings.Contains(err.Error(), "BF16") {
			t.Errorf("%v weights: error %v, want one naming %v and BF16", dt, err, dt)
		} else {
			t.Logf("%v weights: %v", dt, err)
		}
	}
}

// TestOutOfMemoryCUDA: loading past the device's memory limit fails with an
// error naming the allocation and its size, and leaks nothing.
func TestOutOfMemoryCUDA(t *testing.T) {
	dev, err := cuda.OpenWith(0, cuda.Options{MemoryLimit: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = Load(tinyDir, dev)
	if !errors.Is(err, runtime.ErrOutOfMemory) || !strings.Contains(err.Error(), `allocation "model.`) || !strings.Contains(err.Error(), "KiB") {
		t.Errorf("load past the limit: %v", err)
	} else {
		t.Log(err)
	}
	if err := dev.Close(); err != nil {
		t.Errorf("a failed Load leaked: %v", err)
	}
}
