{{/* The release's resource name: <release>, or <release>-idemguard when the release is named otherwise. */}}
{{- define "idemguard.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "idemguard.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "idemguard.selectorLabels" -}}
app.kubernetes.io/name: {{ include "idemguard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "idemguard.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "idemguard.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "idemguard.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* serve's config file: the user's settings and two the chart owns (listen and metrics_listen
are the container's IDEMGUARD_LISTEN and IDEMGUARD_METRICS_LISTEN, which would override the
file). */}}
{{- define "idemguard.config" -}}
{{- range $k := list "mode" "listen" "metrics_listen" "shutdown_grace" -}}
{{- if hasKey $.Values.config $k -}}
{{- fail (printf "config.%s is set by the chart; leave it out of config (shutdown_grace: set shutdownGraceSeconds; listen: containerPort; metrics_listen: metrics.port)" $k) -}}
{{- end -}}
{{- end -}}
{{- if eq (int .Values.containerPort) (int .Values.metrics.port) -}}
{{- fail (printf "containerPort and metrics.port are both %d: the operator listener (/metrics, /ops) needs a port apart from the API's" (int .Values.containerPort)) -}}
{{- end -}}
{{- $own := dict "mode" "production" "shutdown_grace" (printf "%ds" (int .Values.shutdownGraceSeconds)) -}}
{{- toYaml (merge $own (deepCopy .Values.config)) -}}
{{- end -}}

{{- define "idemguard.terminationGracePeriodSeconds" -}}
{{- $floor := add (int .Values.shutdownGraceSeconds) (int .Values.preStopSleepSeconds) -}}
{{- if .Values.terminationGracePeriodSeconds -}}
{{- if le (int .Values.terminationGracePeriodSeconds) (int $floor) -}}
{{- fail (printf "terminationGracePeriodSeconds (%d) must exceed shutdownGraceSeconds + preStopSleepSeconds (%d)" (int .Values.terminationGracePeriodSeconds) (int $floor)) -}}
{{- end -}}
{{- .Values.terminationGracePeriodSeconds -}}
{{- else -}}
{{- add $floor 10 -}}
{{- end -}}
{{- end -}}

{{/* The pod security context every idemguard pod runs with: the image's non-root user. */}}
{{- define "idemguard.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "idemguard.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end -}}

{{/* The DSN of a role's Secret (service, migrate or ops) as IDEMGUARD_MYSQL_DSN. */}}
{{- define "idemguard.dsnEnv" -}}
- name: IDEMGUARD_MYSQL_DSN
  valueFrom:
    secretKeyRef:
      name: {{ .secret.name }}
      key: {{ .secret.mysqlDSNKey }}
{{- end -}}
