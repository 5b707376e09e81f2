package offload_test

import (
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/runtime"
)

func TestParseStreamDType(t *testing.T) {
	for in, want := range map[string]runtime.DType{"": runtime.Invalid, "auto": runtime.Invalid, "fp8": runtime.F8E4M3, "F8_E4M3": runtime.F8E4M3} {
		if got, err := offload.ParseStreamDType(in); err != nil || got != want {
			t.Errorf("ParseStreamDType(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := offload.ParseStreamDType("bf8"); err == nil || !strings.Contains(err.Error(), `"bf8"`) {
		t.Errorf("bf8: %v", err)
	}
	dev := runtime.NewCPU(0)
	defer dev.Close()
	cfg := offload.DefaultConfig(dev)
	cfg.StreamDType = runtime.BF16
	if err := offload.Init(cfg, t.Name()); err == nil || !strings.Contains(err.Error(), "stream dtype BF16 is not supported") {
		t.Errorf("stream dtype BF16: %v", err)
	}
}
