//go:build tools

// Package etcd pins the etcd server used by the end-to-end harness. It is a
// separate module, outside go.work, so its dependencies never mix with ours.
package etcd

import _ "go.etcd.io/etcd/server/v3"
