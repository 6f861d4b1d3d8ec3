// Command opswire-cleanup deletes Failed (Evicted, ...) pods and force-deletes
// pods stuck in Terminating; see docs/cleanup.md.
package main

import (
	"github.com/opswire/opswire/services/cleanup/internal/cleanup"
	"github.com/opswire/opswire/shared/app"
)

func main() { app.Main(app.Spec{Service: cleanup.Service, Actor: true}, cleanup.Run) }
