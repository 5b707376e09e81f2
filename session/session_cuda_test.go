//go:build cuda

package session_test

import (
	"slices"
	"testing"

	"github.com/flextensor-go/flextensor/models/llama"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/runtime/cuda"
	"github.com/flextensor-go/flextensor/session"
)

// TestFractionOnGPU: a budget of 0.5 on cuda:0 (no memory limit) is half of
// the GPU's memory, and the offloaded model generates the reference tokens.
func TestFractionOnGPU(t *testing.T) {
	ref := readReference(t)
	s, err := session.Open("", "cuda:0", session.Options{GPUBudget: "0.5"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ids, err := s.Model.Generate(s.Backend, ref.GreedyPrompt, llama.GenerateOptions{MaxNewTokens: len(ref.GreedyContinuation), IgnoreEOS: true})
	if err != nil || !slices.Equal(ids, ref.GreedyContinuation) {
		t.Fatalf("generated %v, %v; want %v", ids, err, ref.GreedyContinuation)
	}
	in, err := offload.GetOffloadManager(s.Manager).PlanInput()
	if err != nil {
		t.Fatal(err)
	}
	if total := s.Device.(*cuda.Device).TotalMemory(); in.Budget != total/2 {
		t.Fatalf("budget %d bytes, want half of %d", in.Budget, total)
	}
}
