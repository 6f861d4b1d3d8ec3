// Command opswire-cordon cordons (or taints) nodes that carry too many pods
// and releases them when the count falls; see docs/cordon.md.
package main

import (
	"github.com/opswire/opswire/services/cordon/internal/cordon"
	"github.com/opswire/opswire/shared/app"
)

func main() { app.Main(app.Spec{Service: cordon.Service, Actor: true}, cordon.Run) }
