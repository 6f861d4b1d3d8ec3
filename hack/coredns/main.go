// Command coredns is CoreDNS v1.15.0 with only the plugins the harness's real
// node needs (Service and pod names from the API, forwarding, a cache): the
// plugin-selection build CoreDNS documents (plugin.cfg), which compiles in a
// fraction of the time of the full binary with its cloud DNS providers.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/ready"
)

// The order is the order of plugin.cfg, which is the order a query passes
// through the plugins.
var directives = []string{"bind", "ready", "health", "errors", "cache", "kubernetes", "forward"}

func init() { dnsserver.Directives = directives }

func main() { coremain.Run() }
