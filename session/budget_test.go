package session_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/models/decoder"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/session"
)

// leastRe reads the least plan's bytes from a budget error: "(B < N bytes)".
var leastRe = regexp.MustCompile(`\((\d+) < (\d+) bytes\)`)

// TestBudgetAroundTheFloor: over the tiny fixtures (dense, and MoE whose
// experts need a pool slot), with no DeviceMemory (a cpu device whose room
// is unknown), a byte budget below the least plan is refused by Open with
// offload.ErrBudget naming the budget and the least plan; one byte less
// than the least plan is refused too; at the least plan, and above it, the
// first Generate works (profiling, the plan, then inference) and gives the
// resident session's tokens.
func TestBudgetAroundTheFloor(t *testing.T) {
	for _, fx := range []string{"tiny-llama", "tiny-qwen3", "tiny-mixtral", "tiny-qwen3moe"} {
		t.Run(fx, func(t *testing.T) {
			dir := "../testdata/" + fx
			prompt := []int32{1, 5, 9, 3}
			opt := decoder.GenerateOptions{MaxNewTokens: 8, IgnoreEOS: true}
			want := residentTokens(t, dir, prompt, opt)
			_, err := session.Open(dir, "cpu", session.Options{GPUBudget: "1KiB"})
			if !errors.Is(err, offload.ErrBudget) || !strings.Contains(err.Error(), "budget 1.00 KiB is below the least any plan needs") ||
				!strings.Contains(err.Error(), "transfer block") {
				t.Fatalf("a 1 KiB budget: %v; want ErrBudget naming the budget and the least plan", err)
			}
			m := leastRe.FindStringSubmatch(err.Error())
			if m == nil {
				t.Fatalf("no byte counts in %v", err)
			}
			least, _ := strconv.ParseInt(m[2], 10, 64)
			if fx == "tiny-mixtral" || fx == "tiny-qwen3moe" {
				if !strings.Contains(err.Error(), "one pool slot") {
					t.Errorf("an MoE model's least plan does not count a pool slot: %v", err)
				}
			}
			_, err = session.Open(dir, "cpu", session.Options{GPUBudget: fmt.Sprint(least - 1)})
			if !errors.Is(err, offload.ErrBudget) || !strings.Contains(err.Error(), fmt.Sprintf("(%d < %d bytes)", least-1, least)) {
				t.Fatalf("one byte below the least plan (%d): %v; want ErrBudget", least, err)
			}
			for _, budget := range []int64{least, least + least/4} {
				s, err := session.Open(dir, "cpu", session.Options{GPUBudget: fmt.Sprint(budget)})
				if err != nil {
					t.Fatalf("budget %d (least %d): Open: %v", budget, least, err)
				}
				got, err := s.Model.Generate(s.Backend, prompt, opt)
				if err != nil || !slices.Equal(got, want) {
					t.Errorf("budget %d (least %d): Generate = %v, %v; want the resident tokens %v", budget, least, got, err, want)
				}
				plan, perr := offload.GetOffloadManager(s.Manager).Plan()
				if perr != nil || plan.PeakBytes > budget {
					t.Errorf("budget %d: plan %+v, %v; want one within the budget", budget, plan, perr)
				}
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestOffloadErrorsName: SaveProfile of a session that is not offloaded
// says so; a manager name in use by another model is named; a missing
// model directory wraps os.ErrNotExist without speaking of the Hub.
func TestOffloadErrorsName(t *testing.T) {
	s, err := session.Open("", "cpu", session.Options{})
	if err != nil {
		t.Fatal(err)
	}
	err = offload.SaveProfile(t.TempDir(), s.Manager)
	s.Close()
	if !errors.Is(err, offload.ErrNotOffloaded) || !strings.Contains(err.Error(), "not offloaded") || s.Manager != "" {
		t.Errorf("SaveProfile of a resident session (Manager %q): %v; want ErrNotOffloaded saying it is not offloaded", s.Manager, err)
	}

	a, err := session.Open("", "cpu", session.Options{GPUBudget: "0", Manager: "name-clash"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	_, err = session.Open("", "cpu", session.Options{GPUBudget: "0", Manager: "name-clash"})
	if !errors.Is(err, offload.ErrNameInUse) || !strings.Contains(err.Error(), `manager name "name-clash" is in use by another model`) {
		t.Errorf("a second session under the same manager name: %v; want ErrNameInUse naming it", err)
	}
	// The first session still works.
	if ids, err := a.Model.Generate(a.Backend, []int32{1, 2}, decoder.GenerateOptions{MaxNewTokens: 2, IgnoreEOS: true}); err != nil || len(ids) != 2 {
		t.Errorf("the first session after the clash: %v, %v", ids, err)
	}

	missing := filepath.Join(t.TempDir(), "nodir")
	_, err = session.Open(missing, "cpu", session.Options{})
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "no such directory") || strings.Contains(err.Error(), "Hub") {
		t.Errorf("a missing model directory: %v; want os.ErrNotExist, not the Hub", err)
	}
}
