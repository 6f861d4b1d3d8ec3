// Command opswire-notifier fans OPS results out to Feishu and other webhook
// receivers; see docs/notifier.md.
package main

import (
	"github.com/opswire/opswire/services/notifier/internal/service"
	"github.com/opswire/opswire/shared/app"
)

func main() { app.Main(app.Spec{Service: "notifier", NoKube: true}, service.Run) }
