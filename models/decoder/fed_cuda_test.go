//go:build cuda

package decoder_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/flextensor-go/flextensor/internal/devtest"
	"github.com/flextensor-go/flextensor/internal/testmodel"
	"github.com/flextensor-go/flextensor/kernels/cudabackend"
	"github.com/flextensor-go/flextensor/models"
	_ "github.com/flextensor-go/flextensor/models/all"
	"github.com/flextensor-go/flextensor/models/decoder"
)

// TestAsyncDecodeGPU: on the family fixtures, greedy Generate with the
// CUDA backend's token feed on (AsyncDecode, the default) returns
// the tokens, error and final cache length of the same call with it off,
// when the generation runs to MaxNewTokens (1, 2 and 24), stops at a stop
// token or an EOS, OnToken fails or the Context is cancelled; with the
// feed on, 24 tokens take one SetStep (the chain ran on the device), not
// one a token.
func TestAsyncDecodeGPU(t *testing.T) {
	devtest.Each(t, func(t *testing.T, d devtest.Device) {
		gb, ok := d.Backend.(*cudabackend.Backend)
		if !ok {
			t.Skipf("the token feed is the CUDA backend's; %s has none", d.Name)
		}
		saved := gb.AsyncDecode
		defer func() { gb.AsyncDecode = saved }()
		for _, dir := range []string{"tiny-llama", "tiny-qwen2", "tiny-qwen3", "tiny-mistral", "tiny-qwen3moe"} {
			t.Run(dir, func(t *testing.T) {
				m := testmodel.Load(t, models.Load, "../../testdata/"+dir, d.Dev)
				prompt := []int32{5, 17, 42, 3, 9}
				type result struct {
					tokens []int32
					err    string
					cache  int
					sets   uint64
				}
				run := func(on bool, opt decoder.GenerateOptions, eos []int, cancelAt int, failAt int) result {
					gb.AsyncDecode = on
					ctx, cancel := context.WithCancel(context.Background())
					defer cancel()
					opt.Context = ctx
					n := 0
					opt.OnToken = func(int32) error {
						n++
						if n == cancelAt {
							cancel()
						}
						if n == failAt {
							return errors.New("enough")
						}
						return nil
					}
					savedEOS := m.Cfg.EOSTokenIDs
					if eos != nil {
						m.Cfg.EOSTokenIDs = eos
					}
					defer func() { m.Cfg.EOSTokenIDs = savedEOS }()
					var r result
					decoder.SetGenerateEnded(func(c int) { r.cache = c })
					defer decoder.SetGenerateEnded(nil)
					sets := gb.StepSets()
					got, err := m.Generate(gb, prompt, opt)
					r.tokens, r.sets = got, gb.StepSets()-sets
					if err != nil {
						r.err = err.Error()
					}
					return r
				}
				ref := run(false, decoder.GenerateOptions{MaxNewTokens: 24, IgnoreEOS: true}, nil, 0, 0)
				if ref.err != "" || len(ref.tokens) != 24 {
					t.Fatalf("reference: %v %q", ref.tokens, ref.err)
				}
				type tcase struct {
					name             string
					opt              decoder.GenerateOptions
					eos              []int
					cancelAt, failAt int
				}
				for _, c := range []tcase{
					{name: "max24", opt: decoder.GenerateOptions{MaxNewTokens: 24, IgnoreEOS: true}},
					{name: "max1", opt: decoder.GenerateOptions{MaxNewTokens: 1, IgnoreEOS: true}},
					{name: "max2", opt: decoder.GenerateOptions{MaxNewTokens: 2, IgnoreEOS: true}},
					{name: "stop", opt: decoder.GenerateOptions{MaxNewTokens: 24, StopTokens: []int32{ref.tokens[5]}}},
					{name: "stop-first", opt: decoder.GenerateOptions{MaxNewTokens: 24, StopTokens: []int32{ref.tokens[0]}}},
					{name: "eos", opt: decoder.GenerateOptions{MaxNewTokens: 24}, eos: []int{int(ref.tokens[9])}},
					{name: "ontoken-error", opt: decoder.GenerateOptions{MaxNewTokens: 24, IgnoreEOS: true}, failAt: 4},
					{name: "cancel", opt: decoder.GenerateOptions{MaxNewTokens: 24, IgnoreEOS: true}, cancelAt: 3},
				} {
					off := run(false, c.opt, c.eos, c.cancelAt, c.failAt)
					on := run(true, c.opt, c.eos, c.cancelAt, c.failAt)
					if !slices.Equal(on.tokens, off.tokens) || on.err != off.err || on.cache != off.cache {
						t.Errorf("%s: feed on %v %q cache %d; off %v %q cache %d", c.name, on.tokens, on.err, on.cache, off.tokens, off.err, off.cache)
					}
					if c.name == "max24" && dir != "tiny-qwen3moe" && (on.sets > 2 || off.sets < 20) {
						t.Errorf("%s: SetStep calls: %d with the feed on, %d off; want ≤ 2 on (one chain), ≥ 20 off", c.name, on.sets, off.sets)
					}
				}
			})
		}
	})
}
