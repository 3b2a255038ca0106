//go:build tools

// Package etcd only pins the etcd release the test suite builds.
package etcd

import _ "go.etcd.io/etcd/server/v3"
