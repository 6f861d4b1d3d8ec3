{{/* Labels on every object's metadata: kustomize's part-of plus Helm's own. */}}
{{- define "opswire.labels" -}}
app.kubernetes.io/part-of: opswire
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The Secret every pod reads its passwords from. */}}
{{- define "opswire.secretName" -}}
{{- default "opswire-secrets" .Values.secrets.existingSecret -}}
{{- end -}}

{{- define "opswire.validate" -}}
{{- if not (has .Values.nats.mode (list "single" "cluster" "external")) -}}
{{- fail (printf "nats.mode must be single, cluster or external, not %q" .Values.nats.mode) -}}
{{- end -}}
{{- if and (eq .Values.nats.mode "external") (not .Values.nats.external.url) -}}
{{- fail "nats.mode external needs nats.external.url" -}}
{{- end -}}
{{- $role := .Values.fleet.role -}}
{{- if not (has $role (list "" "hub" "edge")) -}}
{{- fail (printf "fleet.role must be \"\", hub or edge, not %q" $role) -}}
{{- end -}}
{{- if and $role (or (ne .Values.nats.mode "cluster") (not .Values.nats.tls.enabled)) -}}
{{- fail "fleet.role hub or edge needs nats.mode cluster with nats.tls.enabled (the leaf connections use the servers' TLS certificate; values-fleet-hub.yaml, values-fleet-edge.yaml)" -}}
{{- end -}}
{{- if and (eq $role "hub") (not .Values.fleet.clusters) -}}
{{- fail "fleet.role hub needs fleet.clusters (the clusters whose OPS the hub sources)" -}}
{{- end -}}
{{- if and (eq $role "edge") (or (not .Values.fleet.cluster) (not .Values.fleet.hub)) -}}
{{- fail "fleet.role edge needs fleet.cluster (this cluster's name) and fleet.hub (the hub's leaf address, host:port)" -}}
{{- end -}}
{{- range $c := append (.Values.fleet.clusters | default list) .Values.fleet.cluster -}}
{{- if and $c (not (regexMatch "^[A-Za-z0-9_-]*[A-Za-z_-][A-Za-z0-9_-]*$" $c)) -}}
{{- fail (printf "fleet cluster %q: letters, digits, '-' and '_' only, not digits alone (a subject token, a JetStream domain, a variable value)" $c) -}}
{{- end -}}
{{- end -}}
{{- if and .Values.gitops (not .Values.secrets.existingSecret) -}}
{{- fail "gitops: true needs secrets.existingSecret: rendered without a cluster (helm template, Argo CD, Flux) the chart would make new NATS passwords on every render. Create the Secret yourself (deploy/make-secret.sh, Sealed Secrets, SOPS, External Secrets) with the keys nats-watcher-password, nats-cordon-password, nats-cleanup-password, nats-report-password, nats-notifier-password, nats-audit-password, nats-operator-password, nats-route-password, feishu-url, feishu-secret (and your secrets.receivers keys) and give its name; docs/deploy.md, \"GitOps (Argo CD, Flux)\"" -}}
{{- end -}}
{{- range $key, $_ := .Values.secrets.receivers -}}
{{- if not (regexMatch "^[a-z0-9]+(-[a-z0-9]+)*$" $key) -}}
{{- fail (printf "secrets.receivers key %q: lower-case letters, digits and single '-' only (it becomes the Secret key and the variable OPSWIRE_<KEY>)" $key) -}}
{{- end -}}
{{- if or (regexMatch "^nats-.*-password$" $key) (has $key (list "feishu-url" "feishu-secret")) -}}
{{- fail (printf "secrets.receivers key %q is one of the chart's own keys (nats-<user>-password, feishu-url, feishu-secret)" $key) -}}
{{- end -}}
{{- end -}}
{{- if and (eq .Values.nats.mode "external") .Values.nats.tls.certManager -}}
{{- fail "nats.tls.certManager makes the bundled servers' certificate; with an external NATS give its CA in the Secret nats.tls.secretName (key ca.crt)" -}}
{{- end -}}
{{- end -}}

{{/* The services this release runs: all five, the notifier alone on a fleet
     hub, all but the notifier on a fleet edge (space-separated). */}}
{{- define "opswire.services" -}}
{{- if eq .Values.fleet.role "hub" -}}notifier
{{- else if eq .Values.fleet.role "edge" -}}watcher cordon cleanup report
{{- else -}}watcher cordon cleanup report notifier
{{- end -}}
{{- end -}}

{{/* auth.conf: the chart's copy of deploy/base/nats/auth.conf, or on a fleet
     hub its copy of deploy/overlays/fleet-hub/auth.conf with one leaf user per
     fleet.clusters entry, in that file's form. */}}
{{- define "opswire.authConf" -}}
{{- if eq .Values.fleet.role "hub" -}}
{{- index (splitList "      # Cluster " (.Files.Get "files/fleet-hub-auth.conf")) 0 | trimSuffix "\n" -}}
{{- range $c := .Values.fleet.clusters }}
      # Cluster {{ $c }}'s edge servers (JetStream domain {{ $c }}).
      {
        user: "leaf-{{ $c }}", password: $NATS_LEAF_{{ upper (replace "-" "_" $c) }}_PASSWORD
        allowed_connection_types: ["LEAFNODE"]
        permissions: {
          publish: { allow: ["ops.{{ $c }}.>", "fleet.{{ $c }}.>", "$JSC.R.{{ $c }}.>"] }
          subscribe: { allow: ["$JS.{{ $c }}.API.>", "$JS.FC.>"] }
        }
      }
{{- end }}
    ]
  }
}
{{ else -}}
{{- .Files.Get "files/auth.conf" -}}
{{- end -}}
{{- end -}}

{{/* The ConfigMap opswire-fleet of an edge: its cluster and the hub's address. */}}
{{- define "opswire.fleetData" -}}
cluster: {{ .Values.fleet.cluster | quote }}
hub: {{ .Values.fleet.hub | quote }}
{{- end -}}

{{- define "opswire.fleetConfigMapName" -}}
{{- printf "opswire-fleet-%s" (include "opswire.fleetData" . | sha256sum | trunc 10) -}}
{{- end -}}

{{/* The notifier's variable for key <key> of secrets.receivers:
     dingtalk-url -> OPSWIRE_DINGTALK_URL. */}}
{{- define "opswire.receiverEnv" -}}
{{- printf "OPSWIRE_%s" (upper (replace "-" "_" .)) -}}
{{- end -}}

{{- define "opswire.bundledNATS" -}}
{{- if ne .Values.nats.mode "external" }}true{{ end -}}
{{- end -}}

{{- define "opswire.natsURL" -}}
{{- if eq .Values.nats.mode "external" -}}
{{- .Values.nats.external.url -}}
{{- else -}}
{{- printf "nats://nats.%s.svc:4222" .Release.Namespace -}}
{{- end -}}
{{- end -}}

{{/* Image of a service: <registry>/<repository>:<tag> (or @<digest>). The
     repository is the service's image.repository or image.prefix+service;
     the registry the service's image.registry, else global.imageRegistry,
     else image.registry ("" = none: Docker Hub). */}}
{{- define "opswire.image" -}}
{{- $v := .root.Values.image -}}
{{- $own := (get (get .root.Values .service | default dict) "image") | default dict -}}
{{- $repo := $own.repository | default (printf "%s%s" $v.prefix .service) -}}
{{- $registry := $own.registry | default .root.Values.global.imageRegistry | default $v.registry -}}
{{- include "opswire.imageRef" (dict "registry" $registry "repository" $repo "tag" ($own.tag | default $v.tag | default .root.Chart.AppVersion) "digest" $own.digest) -}}
{{- end -}}

{{/* The NATS image: nats.image as a map (registry, repository, tag, digest)
     or, as before, one reference string; global.imageRegistry (or
     nats.image.registry) puts it on a mirror. */}}
{{- define "opswire.natsImage" -}}
{{- $i := .Values.nats.image -}}
{{- if kindIs "string" $i -}}
{{- include "opswire.imageRef" (dict "registry" .Values.global.imageRegistry "repository" $i) -}}
{{- else -}}
{{- include "opswire.imageRef" (dict "registry" ($i.registry | default .Values.global.imageRegistry) "repository" $i.repository "tag" $i.tag "digest" $i.digest) -}}
{{- end -}}
{{- end -}}

{{- define "opswire.imageRef" -}}
{{- $ref := .repository -}}
{{- if .digest -}}{{ $ref = printf "%s@%s" $ref .digest }}{{- else if .tag -}}{{ $ref = printf "%s:%s" $ref .tag }}{{- end -}}
{{- if .registry -}}{{ printf "%s/%s" (trimSuffix "/" .registry) $ref }}{{- else -}}{{ $ref }}{{- end -}}
{{- end -}}

{{/* A pod's scheduling and metadata settings: the top-level value, replaced
     by the component's own (nodeSelector, tolerations, affinity,
     priorityClassName) or merged with it, the component's winning
     (podAnnotations, podLabels). .own is the service's (or nats's) values.
     Returns YAML: a map of the effective settings. */}}
{{- define "opswire.podSettings" -}}
{{- $top := .root.Values -}}
{{- $own := .own -}}
{{- $out := dict -}}
{{- range $k := list "nodeSelector" "tolerations" "affinity" "priorityClassName" -}}
{{- $v := get $own $k | default (get $top $k) -}}
{{- if $v }}{{ $_ := set $out $k $v }}{{ end -}}
{{- end -}}
{{- $_ := set $out "podAnnotations" (merge (deepCopy (get $own "podAnnotations" | default dict)) (get $top "podAnnotations" | default dict)) -}}
{{- $_ := set $out "podLabels" (merge (deepCopy (get $own "podLabels" | default dict)) (get $top "podLabels" | default dict)) -}}
{{- toYaml $out -}}
{{- end -}}

{{/* affinity of a pod: the chart's default (.default, a map) with the
     user's nodeAffinity, podAffinity and podAntiAffinity replacing its
     parts by key: a nodeAffinity keeps the replicas' anti-affinity. */}}
{{- define "opswire.affinity" -}}
{{- $out := deepCopy .default -}}
{{- range $k, $v := .user }}{{ $_ := set $out $k $v }}{{ end -}}
{{- toYaml $out -}}
{{- end -}}

{{/* config.yml: the user's file, or the chart's copy of deploy/base/config.yml
     with the release namespace and the stream replicas of the NATS mode. */}}
{{- define "opswire.config" -}}
{{- if .Values.config -}}
{{- .Values.config -}}
{{- else if eq .Values.fleet.role "hub" -}}
{{- $c := .Files.Get "files/fleet-hub-config.yml" -}}
{{- $c = regexReplaceAll "(?m)^(  leaseLockNamespace: )opswire\\b" $c (printf "${1}%s" .Release.Namespace) -}}
{{- $c = regexReplaceAll "(?m)^(  opsSources: )\\[.*\\]" $c (printf "${1}[%s]" (join ", " .Values.fleet.clusters)) -}}
{{- $c -}}
{{- else -}}
{{- $c := .Files.Get "files/config.yml" -}}
{{- $c = regexReplaceAll "(?m)^(  leaseLockNamespace: )opswire\\b" $c (printf "${1}%s" .Release.Namespace) -}}
{{- if eq .Values.nats.mode "cluster" -}}
{{- $c = regexReplaceAll "(?m)^(  replicas: )1( +#.*)$" $c "${1}3${2}" -}}
{{- end -}}
{{- $c -}}
{{- end -}}
{{- end -}}

{{- define "opswire.configMapName" -}}
{{- printf "opswire-config-%s" (print (include "opswire.config" .) "\nTZ=" .Values.timezone | sha256sum | trunc 10) -}}
{{- end -}}

{{/* nats.conf of the bundled servers: deploy/base/nats/nats.conf, or in
     cluster mode deploy/overlays/production/nats.conf (TLS if enabled). */}}
{{- define "opswire.natsConf" -}}
{{- $cluster := eq .Values.nats.mode "cluster" -}}
{{- $role := .Values.fleet.role -}}
# Generated by the opswire chart (nats.mode {{ .Values.nats.mode }}); the same
# settings as deploy/ (TestHelmEqualsKustomize loads both and compares them).
{{- if eq $role "edge" }}
# <cluster>-nats-<n>: server names are unique across the fleet.
server_name: $NATS_SERVER_NAME
{{- else }}
server_name: $POD_NAME
{{- end }}
listen: 0.0.0.0:4222
# Monitoring on the loopback only (no authentication; /connz lists users).
# The probes run inside the container.
http: 127.0.0.1:8222
pid_file: /var/run/nats/nats.pid
# Clients reconnect to another server while this one drains on SIGTERM.
lame_duck_duration: 30s
lame_duck_grace_period: 5s
max_payload: 1MB
jetstream {
  {{- if eq $role "hub" }}
  domain: hub
  {{- else if eq $role "edge" }}
  domain: $OPSWIRE_CLUSTER
  {{- end }}
  store_dir: /data
  max_memory_store: {{ default (ternary "256MB" "64MB" $cluster) .Values.nats.maxMemoryStore }}
  max_file_store: {{ default (ternary "16GB" "4GB" $cluster) .Values.nats.maxFileStore }}
}
{{- if eq $role "hub" }}
feature_flags {
  # Replies to the hub's sourcing requests carry the source's domain.
  js_api_reply_v2: true
  # The sourcing position is part of the replicated stream snapshot.
  js_snapshot_sources: true
}
{{- end }}
{{- if .Values.nats.tls.enabled }}
# TLS for clients: plain connections are refused.
tls {
  cert_file: /etc/nats/tls/tls.crt
  key_file: /etc/nats/tls/tls.key
  ca_file: /etc/nats/tls/ca.crt
  timeout: 5
}
{{- end }}
{{- if $cluster }}
cluster {
  name: {{ ternary "opswire-hub" "opswire" (eq $role "hub") }}
  listen: 0.0.0.0:6222
  # Routes are authenticated (Secret key nats-route-password); each route URL
  # carries the credentials (NATS_ROUTE_0..2 from the StatefulSet).
  authorization { user: route, password: $NATS_ROUTE_PASSWORD }
  routes: [$NATS_ROUTE_0, $NATS_ROUTE_1, $NATS_ROUTE_2]
  {{- if .Values.nats.tls.enabled }}
  # Mutual TLS on routes, on top of the route password.
  tls {
    cert_file: /etc/nats/tls/tls.crt
    key_file: /etc/nats/tls/tls.key
    ca_file: /etc/nats/tls/ca.crt
    verify: true
    timeout: 5
  }
  {{- end }}
}
{{- end }}
{{- if eq $role "hub" }}
# The clusters' edge servers connect here as leaf nodes (Service nats-leaf).
leafnodes {
  listen: 0.0.0.0:7422
  no_advertise: true
  tls {
    cert_file: /etc/nats/tls/tls.crt
    key_file: /etc/nats/tls/tls.key
    ca_file: /etc/nats/tls/ca.crt
    timeout: 5
  }
}
{{- else if eq $role "edge" }}
# The link to the hub (NATS_LEAF_URL from the StatefulSet), verified against
# the hub's CA (Secret nats-hub-ca).
leafnodes {
  reconnect: 2s
  remotes: [
    {
      urls: [$NATS_LEAF_URL]
      account: OPSWIRE
      tls {
        ca_file: /etc/nats/hub-ca/ca.crt
        timeout: 5
      }
    }
  ]
}
{{- end }}
include ./auth.conf
{{- end -}}

{{/* The cluster label the ServiceMonitor / PodMonitor give every series
     (docs/observability.md): clusterLabel, else fleet.cluster on an edge,
     else cluster.name of the effective config.yml ("default" when it names
     none, the services' default). "" when clusterLabel is false. */}}
{{- define "opswire.clusterLabel" -}}
{{- $v := .Values.clusterLabel -}}
{{- if kindIs "bool" $v -}}
{{- if $v -}}{{- fail "clusterLabel: a cluster name, \"\" (this cluster's name) or false (no relabeling), not true" -}}{{- end -}}
{{- else if $v -}}
{{- $v -}}
{{- else if .Values.fleet.cluster -}}
{{- .Values.fleet.cluster -}}
{{- else -}}
{{- $block := regexFind `(?m)^cluster:[ \t]*(#.*)?\n([ \t]*(#.*)?\n|[ \t]+\S.*\n)*` (printf "%s\n" (include "opswire.config" .)) -}}
{{- $line := regexFind `(?m)^[ \t]+name:[ \t]*["']?[A-Za-z0-9_-]+` $block -}}
{{- $name := regexReplaceAll `^[ \t]+name:[ \t]*["']?` $line "" -}}
{{- $name | default "default" -}}
{{- end -}}
{{- end -}}

{{/* relabelings of a ServiceMonitor endpoint / PodMonitor endpoint: the cluster label. */}}
{{- define "opswire.monitorRelabelings" -}}
{{- with include "opswire.clusterLabel" . -}}
relabelings:
- {targetLabel: cluster, replacement: {{ . | quote }}, action: replace}
{{- end -}}
{{- end -}}
