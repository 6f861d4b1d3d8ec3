// Command opswire-watcher mirrors the cluster's pods and nodes into NATS.
package main

import (
	"github.com/opswire/opswire/services/watcher/internal/watcher"
	"github.com/opswire/opswire/shared/app"
)

func main() { app.Main(app.Spec{Service: "watcher", NoPublishBuffer: true}, watcher.Run) }
