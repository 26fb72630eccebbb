{{/*
The chart's name, for the app.kubernetes.io/name label.
*/}}
{{- define "tenantry.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The full name that every object's name starts with: the release's name,
with the chart's name added unless it holds it. A release named tenantry
gives config/'s names (tenantry-manager, ...).
*/}}
{{- define "tenantry.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The manager's name: its Deployment, ClusterRole and bindings.
*/}}
{{- define "tenantry.managerName" -}}
{{- printf "%s-manager" (include "tenantry.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The chart's name and version, for the helm.sh/chart label.
*/}}
{{- define "tenantry.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels of every object.
*/}}
{{- define "tenantry.labels" -}}
helm.sh/chart: {{ include "tenantry.chart" . }}
{{ include "tenantry.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
Labels that select the manager's Pods: fixed for the life of a release
(a Deployment's selector cannot change).
*/}}
{{- define "tenantry.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tenantry.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: manager
{{- end }}

{{/*
The ServiceAccount the manager runs as.
*/}}
{{- define "tenantry.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "tenantry.managerName" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The manager's image: repository:tag, the tag defaulting to appVersion.
*/}}
{{- define "tenantry.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag | toString) }}
{{- end }}

{{/*
Replicas: replicaCount if set, else 3 sharded and 2 with leader election
(1 with neither).
*/}}
{{- define "tenantry.replicas" -}}
{{- if not (kindIs "invalid" .Values.replicaCount) }}
{{- .Values.replicaCount | int }}
{{- else if .Values.sharding.enabled }}
{{- 3 }}
{{- else if .Values.leaderElection.enabled }}
{{- 2 }}
{{- else }}
{{- 1 }}
{{- end }}
{{- end }}

{{/*
Refuses values that do not go together.
*/}}
{{- define "tenantry.validate" -}}
{{- if and .Values.sharding.enabled .Values.leaderElection.enabled }}
{{- fail "sharding.enabled and leaderElection.enabled exclude each other (the manager refuses --shard-mode=lease with --leader-elect: every sharded replica runs): set leaderElection.enabled=false to shard" }}
{{- end }}
{{- if and .Values.dns.service.enabled (gt (include "tenantry.replicas" . | int) 1) }}
{{- fail (printf "dns.service.enabled with %s replicas: a replica answers only the Pods of the tenants it runs and refuses the others', so behind one Service most queries would be refused; run 1 replica for a DNS Service" (include "tenantry.replicas" .)) }}
{{- end }}
{{- if and (not .Values.sharding.enabled) (not .Values.leaderElection.enabled) (gt (include "tenantry.replicas" . | int) 1) }}
{{- fail (printf "replicaCount=%s without leader election or sharding: every replica would run every VirtualCluster; enable leaderElection or sharding, or run 1 replica" (include "tenantry.replicas" .)) }}
{{- end }}
{{- end }}

{{/*
Where the host policy is mounted, and the file --host-policy reads.
*/}}
{{- define "tenantry.hostPolicyDir" -}}
/etc/tenantry
{{- end }}
{{- define "tenantry.hostPolicyFile" -}}
host-policy.yaml
{{- end }}

{{/*
The tenants' DNS Service: its name, and namespace/name for --dns-service.
*/}}
{{- define "tenantry.dnsServiceName" -}}
{{- printf "%s-dns" (include "tenantry.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The Service where control planes report their requests. */}}
{{- define "tenantry.activityServiceName" -}}
{{- printf "%s-activity" (include "tenantry.managerName" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
