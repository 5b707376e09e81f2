package offload_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/runtime"
)

// TestHostCopyMeasureEnv: FT_HOST_COPY_MEASURE is read when the engine is
// built: unset, "" or "1" on, "0" off, stored on the engine; anything else
// ("off", "true", " 0") fails Offload with an error naming the variable
// instead of silently leaving the measurement on.
func TestHostCopyMeasureEnv(t *testing.T) {
	for _, c := range []struct {
		val    string
		unset  bool
		ok, on bool
	}{
		{"", true, true, true}, {"", false, true, true}, {"1", false, true, true}, {"0", false, true, false},
		{"off", false, false, false}, {"true", false, false, false}, {" 0", false, false, false},
	} {
		t.Run(fmt.Sprintf("%q unset=%v", c.val, c.unset), func(t *testing.T) {
			t.Setenv("FT_HOST_COPY_MEASURE", c.val)
			if c.unset {
				os.Unsetenv("FT_HOST_COPY_MEASURE")
			}
			model, _ := hostModel(t, tinyDir)
			cfg := offload.DefaultConfig(runtime.NewCPU(0))
			cfg.GPUBudget, cfg.TransferBlocks = offload.Budget{Bytes: 1 << 30}, 2
			name := uniqueName(t)
			err := offload.Offload(model, &cfg, name)
			if err == nil {
				defer offload.Release(name, true)
			}
			if !c.ok {
				want := fmt.Sprintf("FT_HOST_COPY_MEASURE=%q", c.val)
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Fatalf("Offload: %v, want an error naming %s", err, want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := offload.CopyMeasureOf(name); got != c.on {
				t.Errorf("copy measurement on = %v, want %v", got, c.on)
			}
		})
	}
}
