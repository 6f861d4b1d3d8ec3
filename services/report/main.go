// Command opswire-report sends the scheduled restart report and node
// image-storage alerts to OPS (see docs/report.md).
package main

import (
	"github.com/opswire/opswire/services/report/internal/actor"
	"github.com/opswire/opswire/shared/app"
)

func main() { app.Main(app.Spec{Service: "report", Actor: true}, actor.Run) }
