{{- define "outbox-router.fullname" -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "outbox-router.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "outbox-router.selector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "outbox-router.replicas" -}}
{{- if eq .Values.mode "standby" }}2{{ else if eq .Values.mode "pool" }}{{ int .Values.pool.replicas }}{{ else }}1{{ end -}}
{{- end -}}

{{- define "outbox-router.exactlyOnce" -}}
{{- if or (eq .Values.mode "standby") (eq .Values.mode "pool") .Values.exactlyOnce }}true{{ end -}}
{{- end -}}

{{/*
mode=pool: the pool file (docs/many-databases.md): [pool] with the chart's paths, and
values.config's shared kafka and monitor sections.
*/}}
{{- define "outbox-router.poolConfig" -}}
{{- $config := deepCopy (.Values.config | default dict) -}}
{{- range $section, $_ := $config -}}
{{- if not (has $section (list "kafka" "monitor")) -}}
{{- fail (printf "config.%s: with mode=pool, config holds the sections every source shares (kafka, monitor); a source's own go under pool.sources.NAME (set config.%s to null to drop the default example)" $section $section) -}}
{{- end -}}
{{- end -}}
{{- if hasKey (get $config "monitor" | default dict) "listen" -}}
{{- fail "config.monitor.listen is set by the chart: remove it from config (see values.yaml)" -}}
{{- end -}}
{{- range $owned := list "sources_dir" "state_dir" -}}
{{- if hasKey ($.Values.pool.settings | default dict) $owned -}}
{{- fail (printf "pool.settings.%s is set by the chart: remove it" $owned) -}}
{{- end -}}
{{- end -}}
{{- if not .Values.pool.sources -}}
{{- fail "mode=pool needs at least one source under pool.sources" -}}
{{- end -}}
{{- $name := include "outbox-router.fullname" . -}}
{{- $pool := merge (dict "sources_dir" "/etc/outbox-router-sources" "state_dir" "/var/lib/outbox-router" "group_id" $name "lock_topic_prefix" (printf "%s.pool." $name)) (deepCopy (.Values.pool.settings | default dict)) -}}
{{- $_ := set $config "pool" $pool -}}
{{- $_ := set $config "monitor" (merge (dict "listen" (printf "0.0.0.0:%d" (int .Values.monitorPort))) (get $config "monitor" | default dict)) -}}
{{- toJson $config -}}
{{- end -}}

{{/*
mode=pool: one source's file, from (list $ NAME VALUES): its own sections, exactly-once
under the transactional id <fullname>-<NAME>.
*/}}
{{- define "outbox-router.sourceConfig" -}}
{{- $root := index . 0 -}}
{{- $source := index . 1 -}}
{{- $config := deepCopy (index . 2 | default dict) -}}
{{- range $section := list "kafka" "monitor" "ha" "pool" -}}
{{- if hasKey $config $section -}}
{{- fail (printf "pool.sources.%s.%s: a pool's sources share config.kafka and config.monitor, and the pool decides who leads them; remove it" $source $section) -}}
{{- end -}}
{{- end -}}
{{- range $owned := list "checkpoint.dir" "checkpoint.name" "delivery.mode" "delivery.transactional_id" -}}
{{- $path := splitList "." $owned -}}
{{- if hasKey (get $config (first $path) | default dict) (last $path) -}}
{{- fail (printf "pool.sources.%s.%s is set by the chart: remove it" $source $owned) -}}
{{- end -}}
{{- end -}}
{{- $id := printf "%s-%s" (include "outbox-router.fullname" $root) $source -}}
{{- $_ := set $config "delivery" (merge (dict "mode" "exactly-once" "transactional_id" $id) (get $config "delivery" | default dict)) -}}
{{- toJson $config -}}
{{- end -}}

{{/*
The router's configuration: values.config with the keys the chart owns, as a map.
*/}}
{{- define "outbox-router.config" -}}
{{- if eq .Values.mode "pool" -}}
{{- include "outbox-router.poolConfig" . -}}
{{- else -}}
{{- $config := deepCopy (.Values.config | default dict) -}}
{{- range $owned := list "checkpoint.dir" "checkpoint.name" "monitor.listen" "delivery.mode" "delivery.transactional_id" "ha.enabled" -}}
{{- $path := splitList "." $owned -}}
{{- if hasKey (get $config (first $path) | default dict) (last $path) -}}
{{- fail (printf "config.%s is set by the chart: remove it from config (see values.yaml)" $owned) -}}
{{- end -}}
{{- end -}}
{{- $name := include "outbox-router.fullname" . -}}
{{- $checkpoint := dict "dir" "/var/lib/outbox-router/checkpoint" -}}
{{- $monitor := dict "listen" (printf "0.0.0.0:%d" (int .Values.monitorPort)) -}}
{{- if include "outbox-router.exactlyOnce" . -}}
{{- $_ := set $config "delivery" (merge (dict "mode" "exactly-once" "transactional_id" (.Values.transactionalId | default $name)) (get $config "delivery" | default dict)) -}}
{{- else -}}
{{- $_ := set $checkpoint "name" $name -}}
{{- end -}}
{{- if eq .Values.mode "standby" -}}
{{- $_ := set $config "ha" (merge (dict "enabled" true) (get $config "ha" | default dict)) -}}
{{- end -}}
{{- $_ := set $config "checkpoint" (merge $checkpoint (get $config "checkpoint" | default dict)) -}}
{{- $_ := set $config "monitor" (merge $monitor (get $config "monitor" | default dict)) -}}
{{- toJson $config -}}
{{- end -}}
{{- end -}}

{{/*
A map as TOML: top-level values first, then one [section] per map, deeper maps and
lists inline. Keys are quoted and scalars written as JSON, which TOML reads alike
(numbers stay numbers: Helm's float64 values are written without exponents).
*/}}
{{- define "outbox-router.toml" -}}
{{- range $key, $value := . }}
{{- if not (kindIs "map" $value) }}
{{ include "outbox-router.tomlKey" $key }} = {{ include "outbox-router.tomlValue" (list $key $value) }}
{{- end }}
{{- end }}
{{- range $key, $value := . }}
{{- if kindIs "map" $value }}

[{{ include "outbox-router.tomlKey" $key }}]
{{- range $k, $v := $value }}
{{ include "outbox-router.tomlKey" $k }} = {{ include "outbox-router.tomlValue" (list (printf "%s.%s" $key $k) $v) }}
{{- end }}
{{- end }}
{{- end }}
{{- end -}}

{{- define "outbox-router.tomlValue" -}}
{{- $path := index . 0 -}}
{{- $value := index . 1 -}}
{{- if kindIs "map" $value -}}
{ {{- $first := true -}}
{{- range $k, $v := $value -}}
{{- if not $first }}, {{ end -}}
{{- $first = false -}}
{{ include "outbox-router.tomlKey" $k }} = {{ include "outbox-router.tomlValue" (list (printf "%s.%s" $path $k) $v) }}
{{- end -}} }
{{- else if kindIs "slice" $value -}}
[{{- range $i, $v := $value -}}
{{- if $i }}, {{ end -}}
{{ include "outbox-router.tomlValue" (list (printf "%s[%d]" $path $i) $v) }}
{{- end -}}]
{{- else if kindIs "invalid" $value -}}
{{- fail (printf "config.%s is null: TOML has no null; remove the key for its default" $path) -}}
{{- else -}}
{{ toJson $value }}
{{- end -}}
{{- end -}}

{{- define "outbox-router.tomlKey" -}}
{{- if regexMatch "^[A-Za-z0-9_-]+$" . }}{{ . }}{{ else }}{{ toJson . }}{{ end -}}
{{- end -}}

{{/*
The monitor port's scheme: HTTPS when config.monitor.tls names a certificate (the
console's credentials are refused over plain HTTP off loopback), else HTTP.
*/}}
{{- define "outbox-router.monitorScheme" -}}
{{- if (get (get (.Values.config | default dict) "monitor" | default dict) "tls") -}}HTTPS{{- else -}}HTTP{{- end -}}
{{- end -}}
