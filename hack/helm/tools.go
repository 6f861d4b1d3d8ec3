//go:build tools

// Package helm pins the helm CLI the chart tests run (helm lint, helm
// template). It is a separate module, outside go.work, so its dependencies
// never mix with ours.
package helm

import _ "helm.sh/helm/v3/cmd/helm"
