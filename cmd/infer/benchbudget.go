package main

import (
	"fmt"

	"github.com/flextensor-go/flextensor/offload"
)

// parseBenchBudget reads one --budgets entry. A zero budget in any
// spelling ("0", "0GiB", "0B") is the model's minimum (the caller applies
// Footprint.Min, as session.Open does for --gpu-budget 0), never "no
// budget": isMin reports it.
func parseBenchBudget(s string) (b offload.Budget, isMin bool, err error) {
	if b, err = offload.ParseBudget(s); err != nil {
		return offload.Budget{}, false, usageError{fmt.Errorf("--budgets: %w", err)}
	}
	return b, b.Bytes == 0 && b.Fraction == 0, nil
}
