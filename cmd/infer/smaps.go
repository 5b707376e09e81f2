package main

import (
	"fmt"

	"github.com/flextensor-go/flextensor/runtime/hostmem"
)

// hugePagesLine says how much of the mappings holding blocks the kernel
// backs with transparent huge pages (this process's smaps; "huge pages
// unknown" where there is none, as off Linux).
func hugePagesLine(blocks [][]byte) string {
	rss, huge, err := hostmem.Coverage(blocks)
	if err != nil {
		return "huge pages unknown (" + err.Error() + ")"
	}
	return fmt.Sprintf("their mappings: AnonHugePages %d MiB of Rss %d MiB", huge>>10, rss>>10)
}
