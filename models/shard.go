package models

import (
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/loader"
	"github.com/flextensor-go/flextensor/models/decoder"
	"github.com/flextensor-go/flextensor/runtime"
)

// LoadSharded is Load cut over several devices for tensor parallelism
// (decoder.Builder.LoadSharded): shard i is bound on bindOn[i] and runs on
// backends[i] with rank i of comms. The returned model is the leader (rank
// 0's shard), which runs them all. Close the model, then the checkpoint.
func LoadSharded(dir string, bindOn []runtime.Device, backends []kernels.Backend, comms []runtime.Communicator) (*decoder.Model, *loader.Checkpoint, error) {
	return decoder.Builder(checkedNew).LoadSharded(dir, bindOn, backends, comms)
}
