module github.com/opswire/opswire/services/report

go 1.26.0

require (
	github.com/opswire/opswire/shared v0.0.0
	github.com/robfig/cron/v3 v3.0.1
)

require (
	github.com/go-logr/logr v1.4.3 // indirect
	go.yaml.in/yaml/v2 v2.4.4 // indirect
	k8s.io/apimachinery v0.37.2 // indirect
	k8s.io/klog/v2 v2.140.0 // indirect
	k8s.io/utils v0.0.0-20260626114624-be93311217bd // indirect
	sigs.k8s.io/yaml v1.6.0 // indirect
)

replace github.com/opswire/opswire/shared => ../../shared
