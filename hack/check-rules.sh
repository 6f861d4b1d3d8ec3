#!/usr/bin/env bash
# make rules: promtool checks the alert rules (the plain file and the
# PrometheusRule's groups) and runs their unit tests.
set -euo pipefail
cd "$(dirname "$0")/.."
promtool=$(./hack/build-promtool.sh | tail -n 1)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The PrometheusRule's spec is a rules file; check it on its own too.
sed -n '/^spec:/,$p' deploy/prometheus/prometheusrule.yaml | sed '1d; s/^  //' > "$tmp/prometheusrule-spec.yaml"
"$promtool" check rules deploy/prometheus/opswire-rules.yaml "$tmp/prometheusrule-spec.yaml"
"$promtool" test rules deploy/prometheus/rules-test.yaml
