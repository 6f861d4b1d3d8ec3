//go:build tools

// Package natscli pins the nats CLI the docs-command tests run (the very
// commands README.md and docs/ hand to on-call). It is a separate module,
// outside go.work, so its dependencies never mix with ours.
package natscli

import _ "github.com/nats-io/natscli/nats"
