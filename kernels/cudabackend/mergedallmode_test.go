package cudabackend

import (
	"strings"
	"testing"
)

func TestParseMergedAll(t *testing.T) {
	for s, want := range map[string]MergedAllMode{"": MergedSmall, "0": MergedSmall, "1": MergedSmall, "gateup": MergedAllGateUp, "qkv": MergedAllQKV, "all": MergedAll} {
		got, err := parseMergedAll(s)
		if err != nil || got != want {
			t.Errorf("parseMergedAll(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	if _, err := parseMergedAll("everything"); err == nil || !strings.Contains(err.Error(), "FT_MERGED_GEMM") {
		t.Errorf("parseMergedAll(everything): %v, want an error naming FT_MERGED_GEMM", err)
	}
	for _, c := range []struct {
		m          MergedAllMode
		gate, qkvs bool
	}{{MergedSmall, false, false}, {MergedAllGateUp, true, false}, {MergedAllQKV, false, true}, {MergedAll, true, true}} {
		if c.m.mergesAll(true) != c.gate || c.m.mergesAll(false) != c.qkvs {
			t.Errorf("mode %d: gate/up %v q/k/v %v, want %v %v", c.m, c.m.mergesAll(true), c.m.mergesAll(false), c.gate, c.qkvs)
		}
	}
	if !mergedRoom(470<<20, 1<<30) || mergedRoom(600<<20, 1<<30) || mergedRoom(0, 1<<30) {
		t.Errorf("mergedRoom: a scratch takes at most half the room left")
	}
}
