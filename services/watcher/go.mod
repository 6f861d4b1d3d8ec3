module github.com/opswire/opswire/services/watcher

go 1.26.0

require github.com/opswire/opswire/shared v0.0.0

replace github.com/opswire/opswire/shared => ../../shared
