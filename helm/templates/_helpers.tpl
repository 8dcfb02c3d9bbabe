{{/*
Names. Every object is "<fullname>" or "<fullname>-<part>", cut to the 63 characters a DNS label allows.
*/}}
{{- define "gpuportal.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "gpuportal.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* "<fullname>-<part>"; call with (list $ "part"). */}}
{{- define "gpuportal.partname" -}}
{{- $root := index . 0 -}}
{{- printf "%s-%s" (include "gpuportal.fullname" $root | trunc (int (sub 62 (len (index . 1))))) (index . 1) | trimSuffix "-" -}}
{{- end -}}

{{- define "gpuportal.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels on every object; call with (list $ "component"). */}}
{{- define "gpuportal.labels" -}}
{{- $root := index . 0 -}}
helm.sh/chart: {{ include "gpuportal.chart" $root }}
{{ include "gpuportal.selectorLabels" . }}
app.kubernetes.io/version: {{ $root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ $root.Release.Service }}
app.kubernetes.io/part-of: gpuportal
{{- end -}}

{{/* Labels a selector matches; call with (list $ "component"). */}}
{{- define "gpuportal.selectorLabels" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ include "gpuportal.name" $root }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "gpuportal.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "gpuportal.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The web's account (web, beat): read-only, and only inside team namespaces. */}}
{{- define "gpuportal.webServiceAccountName" -}}
{{- printf "%s-web" (include "gpuportal.serviceAccountName" . | trunc 59 | trimSuffix "-") -}}
{{- end -}}

{{/* The provisioner's account: the only one that may create team namespaces and their RoleBindings. */}}
{{- define "gpuportal.provisionerServiceAccountName" -}}
{{- printf "%s-provisioner" (include "gpuportal.serviceAccountName" . | trunc 51 | trimSuffix "-") -}}
{{- end -}}

{{/* The proxy's account: reads services and EndpointSlices, only inside team namespaces. */}}
{{- define "gpuportal.proxyServiceAccountName" -}}
{{- include "gpuportal.partname" (list . "proxy") -}}
{{- end -}}

{{/* The ClusterRole the proxy's account is bound to in every team namespace (KUBE_PROXY_CLUSTERROLE). */}}
{{- define "gpuportal.proxyRoleName" -}}
{{- .Values.rbac.proxyRoleName | default (include "gpuportal.partname" (list . "proxy")) -}}
{{- end -}}

{{/* The ClusterRole the web's account is bound to in every team namespace (KUBE_READER_CLUSTERROLE). */}}
{{- define "gpuportal.readerRoleName" -}}
{{- .Values.rbac.readerRoleName | default (include "gpuportal.partname" (list . "reader")) -}}
{{- end -}}

{{/* Render the ValidatingAdmissionPolicy? "auto": where the cluster serves it (Kubernetes 1.30+). */}}
{{- define "gpuportal.admissionPolicyEnabled" -}}
{{- $mode := .Values.rbac.admissionPolicy -}}
{{- if or (eq $mode "always") (and (eq $mode "auto") (.Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy")) -}}
true
{{- end -}}
{{- end -}}

{{/* The provisioner's guard as a webhook (admission-webhook.yaml): where the policy above is not rendered. */}}
{{- define "gpuportal.admissionWebhookEnabled" -}}
{{- $mode := .Values.rbac.admissionWebhook -}}
{{- if and .Values.rbac.create .Values.provisioner.enabled (or (eq $mode "always") (and (eq $mode "auto") (not (include "gpuportal.admissionPolicyEnabled" .)))) -}}
true
{{- end -}}
{{- end -}}

{{/* The ClusterRole the portal binds in every team namespace; the app gets it as KUBE_WORKLOADS_CLUSTERROLE. */}}
{{- define "gpuportal.workloadsRoleName" -}}
{{- .Values.rbac.workloadsRoleName | default (include "gpuportal.partname" (list . "workloads")) -}}
{{- end -}}

{{/* PORTAL_INSTANCE: a label value (63 characters at most) that tells this installation's objects apart. */}}
{{- define "gpuportal.instance" -}}
{{- .Values.config.instance | default (printf "%s.%s" .Release.Namespace (include "gpuportal.fullname" .)) | trunc 63 | trimSuffix "-" | trimSuffix "." -}}
{{- end -}}

{{- define "gpuportal.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag | toString) -}}
{{- end -}}

{{- define "gpuportal.secretName" -}}
{{- include "gpuportal.fullname" . -}}
{{- end -}}

{{/* The Secret holding the private half of the seal key pair (the worker's only). */}}
{{- define "gpuportal.sealSecretName" -}}
{{- .Values.seal.existingSecret | default (include "gpuportal.partname" (list . "seal")) -}}
{{- end -}}

{{- define "gpuportal.postgresqlHost" -}}
{{- include "gpuportal.partname" (list . "postgresql") -}}
{{- end -}}

{{- define "gpuportal.redisHost" -}}
{{- include "gpuportal.partname" (list . "redis") -}}
{{- end -}}

{{/*
Does the chart's own Secret hold anything? It holds SECRET_KEY unless an existing Secret gives it,
DATABASE_URL (and the bundled database's password) unless an existing Secret gives it, REDIS_URL and
REDIS_PASSWORD with the bundled Redis, REDIS_URL when an external Redis URL is given in values, and
EMAIL_URL when given in values.
*/}}
{{- define "gpuportal.ownSecretNeeded" -}}
{{- if or (not .Values.secret.existingSecret) (not .Values.externalDatabase.existingSecret) .Values.redis.enabled (and (not .Values.redis.enabled) .Values.externalRedis.url) (and .Values.email.url (not .Values.email.existingSecret)) (and .Values.oidc.enabled .Values.oidc.clientSecret (not .Values.oidc.existingSecret)) -}}
true
{{- end -}}
{{- end -}}

{{/*
Non-secret configuration, as environment variables: the ConfigMap's data, and the env of the migration
Job (which runs before the ConfigMap exists on a first install).
*/}}
{{- define "gpuportal.configEnv" -}}
{{- $cfg := .Values.config -}}
DEBUG: {{ ternary "1" "0" $cfg.debug | quote }}
ALLOWED_HOSTS: {{ include "gpuportal.allowedHosts" . | quote }}
CSRF_TRUSTED_ORIGINS: {{ include "gpuportal.csrfTrustedOrigins" . | quote }}
SITE_URL: {{ include "gpuportal.siteUrl" . | quote }}
PROXY_ORIGIN: {{ .Values.proxy.origin | quote }}
LOG_LEVEL: {{ $cfg.logLevel | quote }}
TIME_ZONE: {{ $cfg.timeZone | quote }}
SECURE_COOKIES: {{ ternary "1" "0" $cfg.secureCookies | quote }}
BEHIND_TLS_PROXY: {{ ternary "1" "0" $cfg.behindTlsProxy | quote }}
TRUSTED_PROXIES: {{ $cfg.trustedProxies | join "," | quote }}
PROXY_TRUSTED_PROXIES: {{ $cfg.trustedProxies | join "," | quote }}
KUBE_NAMESPACE_PREFIX: {{ $cfg.kubeNamespacePrefix | quote }}
KUBE_WORKLOADS_CLUSTERROLE: {{ include "gpuportal.workloadsRoleName" . | quote }}
KUBE_SERVICE_ACCOUNT: {{ printf "%s/%s" .Release.Namespace (include "gpuportal.serviceAccountName" .) | quote }}
KUBE_READER_CLUSTERROLE: {{ include "gpuportal.readerRoleName" . | quote }}
KUBE_WEB_SERVICE_ACCOUNT: {{ printf "%s/%s" .Release.Namespace (include "gpuportal.webServiceAccountName" .) | quote }}
KUBE_PROXY_CLUSTERROLE: {{ include "gpuportal.proxyRoleName" . | quote }}
KUBE_PROXY_SERVICE_ACCOUNT: {{ ternary (printf "%s/%s" .Release.Namespace (include "gpuportal.proxyServiceAccountName" .)) "" (and .Values.proxy.enabled .Values.rbac.create) | quote }}
TEAM_EGRESS_ALLOW_CIDRS: {{ .Values.networkPolicy.teamEgress.allowCidrs | join "," | quote }}
TEAM_EGRESS_DENY_CIDRS: {{ .Values.networkPolicy.teamEgress.denyCidrs | join "," | quote }}
TEAM_INGRESS_PROXY_LABELS: {{ printf "app.kubernetes.io/instance=%s,app.kubernetes.io/component=proxy" .Release.Name | quote }}
TEAM_INGRESS_PORTAL_NAMESPACE_LABELS: {{ printf "kubernetes.io/metadata.name=%s" .Release.Namespace | quote }}
PORTAL_INSTANCE: {{ include "gpuportal.instance" . | quote }}
{{- if and .Values.agent.enabled .Values.agent.push.enabled }}
AGENT_SERVICE_ACCOUNT: {{ printf "%s/%s" .Release.Namespace (include "gpuportal.partname" (list . "agent")) | quote }}
AGENT_DAEMONSET: {{ include "gpuportal.partname" (list . "agent") | quote }}
AGENT_TOKEN_AUDIENCE: {{ .Values.agent.push.tokenAudience | quote }}
{{- end }}
PORTAL_SEAL_PUBLIC_KEY: {{ .Values.seal.publicKey | quote }}
WORKSPACE_STORAGE_CLASS: {{ $cfg.workspaceStorageClass | quote }}
WORKSPACE_HOME_GIB: {{ $cfg.workspaceHomeGib | toString | quote }}
WORKSPACE_TEAM_GIB: {{ $cfg.workspaceTeamGib | toString | quote }}
PORTAL_VAR_DIR: "/tmp/gpuportal"
HOME: "/tmp"
{{- with .Values.email.from }}
DEFAULT_FROM_EMAIL: {{ . | quote }}
{{- end }}
{{- if .Values.oidc.enabled }}
OIDC_ISSUER: {{ .Values.oidc.issuer | quote }}
OIDC_CLIENT_ID: {{ .Values.oidc.clientId | quote }}
OIDC_PROVIDER_NAME: {{ .Values.oidc.providerName | quote }}
OIDC_SCOPES: {{ join "," .Values.oidc.scopes | quote }}
OIDC_USERNAME_CLAIM: {{ .Values.oidc.usernameClaim | quote }}
OIDC_EMAIL_CLAIM: {{ .Values.oidc.emailClaim | quote }}
OIDC_PASSWORD_LOGIN: {{ ternary "1" "0" .Values.oidc.passwordLogin | quote }}
OIDC_END_PROVIDER_SESSION: {{ ternary "1" "0" .Values.oidc.endProviderSession | quote }}
{{- end }}
{{- range $name, $value := .Values.extraEnv }}
{{ $name }}: {{ $value | toString | quote }}
{{- end }}
{{- end -}}

{{- define "gpuportal.siteUrl" -}}
{{- if .Values.config.siteUrl -}}
{{- .Values.config.siteUrl -}}
{{- else if and .Values.ingress.enabled .Values.ingress.hosts -}}
{{- printf "%s://%s" (ternary "https" "http" (gt (len .Values.ingress.tls) 0)) (index .Values.ingress.hosts 0).host -}}
{{- else -}}
{{- printf "http://%s" (include "gpuportal.partname" (list . "web")) -}}
{{- end -}}
{{- end -}}

{{/* The Service name (probes and in-cluster clients), the ingress hosts and anything added in values. */}}
{{- define "gpuportal.allowedHosts" -}}
{{- $hosts := list (include "gpuportal.partname" (list . "web")) (printf "%s.%s.svc" (include "gpuportal.partname" (list . "web")) .Release.Namespace) -}}
{{- if .Values.ingress.enabled -}}
{{- range .Values.ingress.hosts -}}
{{- $hosts = append $hosts .host -}}
{{- end -}}
{{- end -}}
{{- $hosts = concat $hosts .Values.config.allowedHosts -}}
{{- $hosts | uniq | join "," -}}
{{- end -}}

{{- define "gpuportal.csrfTrustedOrigins" -}}
{{- $origins := list -}}
{{- if .Values.ingress.enabled -}}
{{- $scheme := ternary "https" "http" (gt (len .Values.ingress.tls) 0) -}}
{{- range .Values.ingress.hosts -}}
{{- $origins = append $origins (printf "%s://%s" $scheme .host) -}}
{{- end -}}
{{- end -}}
{{- $origins = concat $origins .Values.config.csrfTrustedOrigins -}}
{{- $origins | uniq | join "," -}}
{{- end -}}

{{/* Environment of every portal container: secrets by reference, the rest from the ConfigMap. */}}
{{- define "gpuportal.secretEnv" -}}
- name: SECRET_KEY
  valueFrom:
    secretKeyRef:
      name: {{ default (include "gpuportal.secretName" .) .Values.secret.existingSecret }}
      key: {{ ternary .Values.secret.existingSecretKey "SECRET_KEY" (ne .Values.secret.existingSecret "") }}
- name: DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ default (include "gpuportal.secretName" .) .Values.externalDatabase.existingSecret }}
      key: {{ ternary .Values.externalDatabase.existingSecretKey "DATABASE_URL" (ne .Values.externalDatabase.existingSecret "") }}
- name: REDIS_URL
  valueFrom:
    secretKeyRef:
{{- if .Values.redis.enabled }}
      name: {{ include "gpuportal.secretName" . }}
      key: REDIS_URL
{{- else }}
      name: {{ default (include "gpuportal.secretName" .) .Values.externalRedis.existingSecret }}
      key: {{ ternary .Values.externalRedis.existingSecretKey "REDIS_URL" (ne .Values.externalRedis.existingSecret "") }}
{{- end }}
{{- if or .Values.email.url .Values.email.existingSecret }}
- name: EMAIL_URL
  valueFrom:
    secretKeyRef:
      name: {{ default (include "gpuportal.secretName" .) .Values.email.existingSecret }}
      key: {{ ternary .Values.email.existingSecretKey "EMAIL_URL" (ne .Values.email.existingSecret "") }}
{{- end }}
{{- if and .Values.oidc.enabled (or .Values.oidc.clientSecret .Values.oidc.existingSecret) }}
- name: OIDC_CLIENT_SECRET
  valueFrom:
    secretKeyRef:
      name: {{ default (include "gpuportal.secretName" .) .Values.oidc.existingSecret }}
      key: {{ ternary .Values.oidc.existingSecretKey "OIDC_CLIENT_SECRET" (ne .Values.oidc.existingSecret "") }}
{{- end }}
{{- end -}}

{{- define "gpuportal.envFrom" -}}
- configMapRef:
    name: {{ include "gpuportal.partname" (list . "config") }}
{{- with .Values.extraEnvFrom }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Pod annotations that roll the pods when their configuration changes. */}}
{{- define "gpuportal.checksums" -}}
checksum/config: {{ include (print .Template.BasePath "/configmap.yaml") . | sha256sum }}
{{- /* The Secret may hold generated values, so hash what feeds it, not a fresh render of it. */}}
checksum/secret: {{ list .Values.secret .Values.externalDatabase .Values.externalRedis .Values.postgresql.auth .Values.redis.password .Values.email .Values.oidc .Values.seal | toJson | sha256sum }}
{{- end -}}

{{/* Volumes every portal pod gets: a writable /tmp on a read-only root filesystem. */}}
{{- define "gpuportal.tmpVolume" -}}
- name: tmp
  emptyDir:
    sizeLimit: {{ .Values.tmpSizeLimit }}
{{- end -}}

{{- define "gpuportal.tmpVolumeMount" -}}
- name: tmp
  mountPath: /tmp
{{- end -}}

{{/*
Cross-field checks that a JSON schema cannot word clearly. Included by configmap.yaml, which is always
rendered, so `helm install`, `helm upgrade` and `helm template` all stop here with the message.
*/}}
{{- define "gpuportal.validate" -}}
{{- $v := .Values -}}
{{- if and (not $v.secret.existingSecret) (not $v.secret.secretKey) (not $v.secret.generateSecretKey) -}}
{{- fail "secret.secretKey is required when secret.existingSecret is empty: set secret.secretKey (a long random string), name a Secret in secret.existingSecret, or set secret.generateSecretKey=true" -}}
{{- end -}}
{{- if and $v.secret.secretKey (lt (len $v.secret.secretKey) 32) -}}
{{- fail (printf "secret.secretKey is %d characters long; use at least 32 random characters" (len $v.secret.secretKey)) -}}
{{- end -}}
{{- if and (not $v.postgresql.enabled) (not $v.externalDatabase.url) (not $v.externalDatabase.existingSecret) -}}
{{- fail "postgresql.enabled is false, so an external database is needed: set externalDatabase.url (postgres://...) or externalDatabase.existingSecret" -}}
{{- end -}}
{{- if and (not $v.redis.enabled) (not $v.externalRedis.url) (not $v.externalRedis.existingSecret) -}}
{{- fail "redis.enabled is false, so an external Redis is needed: set externalRedis.url (redis://...) or externalRedis.existingSecret" -}}
{{- end -}}
{{- if and $v.oidc.enabled (or (not $v.oidc.issuer) (not $v.oidc.clientId)) -}}
{{- fail "oidc.enabled is true but oidc.issuer or oidc.clientId is empty: set both (and oidc.clientSecret or oidc.existingSecret)" -}}
{{- end -}}
{{- if and $v.oidc.enabled (not $v.oidc.clientSecret) (not $v.oidc.existingSecret) -}}
{{- fail "oidc.enabled is true but the client has no secret: set oidc.clientSecret or oidc.existingSecret" -}}
{{- end -}}
{{- if not $v.seal.publicKey -}}
{{- fail "seal.publicKey is required: the web seals users' secrets to it for the worker. Make a pair with `python -m portal.sealing` (in the portal image) and set seal.publicKey, and seal.privateKey or seal.existingSecret" -}}
{{- end -}}
{{- if and (not $v.seal.privateKey) (not $v.seal.existingSecret) -}}
{{- fail "seal.privateKey or seal.existingSecret is required: the worker opens what the web sealed with the private half of seal.publicKey's pair" -}}
{{- end -}}
{{- if and $v.seal.privateKey $v.seal.existingSecret -}}
{{- fail "seal.privateKey and seal.existingSecret are both set: give the private half in one place only" -}}
{{- end -}}
{{- if and $v.ingress.enabled (not $v.ingress.hosts) -}}
{{- fail "ingress.enabled is true but ingress.hosts is empty: name at least one host" -}}
{{- end -}}
{{- $slugs := list -}}
{{- $labels := dict -}}
{{- range $i, $gpu := $v.seed.gpuTypes -}}
{{- if has $gpu.slug $slugs -}}
{{- fail (printf "seed.gpuTypes[%d].slug %q appears twice in seed.gpuTypes" $i $gpu.slug) -}}
{{- end -}}
{{- $slugs = append $slugs $gpu.slug -}}
{{- /* A node is counted under one GPU type only: two types with one label leave the second without nodes. */ -}}
{{- $label := printf "%s=%s" ($gpu.node_label_key | default "gputype") ($gpu.node_label_value | default $gpu.slug) -}}
{{- if hasKey $labels $label -}}
{{- fail (printf "seed.gpuTypes[%d].node_label_value: %s is already the node label of GPU type %q; each GPU type needs a label of its own" $i $label (get $labels $label)) -}}
{{- end -}}
{{- $_ := set $labels $label $gpu.slug -}}
{{- end -}}
{{- range $i, $quota := $v.seed.defaultQuotas -}}
{{- if not (has $quota.gpu_type $slugs) -}}
{{- fail (printf "seed.defaultQuotas[%d].gpu_type %q is not a GPU type in seed.gpuTypes (known: %s)" $i $quota.gpu_type (ternary "none" (join ", " $slugs) (empty $slugs))) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
The pod template of a portal process (web, worker, beat, tracker). Call with a dict:
  root: $, component: "web", spec: .Values.web, command: list, automountToken: bool,
  account: the ServiceAccount's name (optional; the engine's by default),
  ports/probes: YAML strings for the container (optional),
  sealPrivateKey: true for the worker alone (the private half of the seal key pair, as a file).
*/}}
{{- define "gpuportal.portalPodTemplate" -}}
{{- $root := .root -}}
{{- $spec := .spec -}}
metadata:
  labels:
    {{- include "gpuportal.selectorLabels" (list $root .component) | nindent 4 }}
    {{- with $spec.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  annotations:
    {{- include "gpuportal.checksums" $root | nindent 4 }}
    {{- with $spec.podAnnotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  serviceAccountName: {{ .account | default (include "gpuportal.serviceAccountName" $root) }}
  # Only the processes that call the Kubernetes API get a token (see values: <component>.automountServiceAccountToken).
  automountServiceAccountToken: {{ .automountToken }}
  {{- with $root.Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    {{- toYaml $root.Values.podSecurityContext | nindent 4 }}
  {{- with $spec.terminationGracePeriodSeconds }}
  terminationGracePeriodSeconds: {{ . }}
  {{- end }}
  containers:
    - name: {{ .component }}
      image: {{ include "gpuportal.image" $root }}
      imagePullPolicy: {{ $root.Values.image.pullPolicy }}
      command:
        {{- toYaml .command | nindent 8 }}
      {{- with $spec.extraArgs }}
      args:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      envFrom:
        {{- include "gpuportal.envFrom" $root | nindent 8 }}
      env:
        {{- include "gpuportal.secretEnv" $root | nindent 8 }}
        {{- if .sealPrivateKey }}
        - name: PORTAL_SEAL_PRIVATE_KEY_FILE
          value: /etc/gpuportal/seal/private-key
        {{- end }}
      {{- with .ports }}
      ports:
        {{- . | nindent 8 }}
      {{- end }}
      {{- with .probes }}
      {{- . | nindent 6 }}
      {{- end }}
      resources:
        {{- toYaml $spec.resources | nindent 8 }}
      securityContext:
        {{- toYaml $root.Values.securityContext | nindent 8 }}
      volumeMounts:
        {{- include "gpuportal.tmpVolumeMount" $root | nindent 8 }}
        {{- if .sealPrivateKey }}
        - name: seal
          mountPath: /etc/gpuportal/seal
          readOnly: true
        {{- end }}
  volumes:
    {{- include "gpuportal.tmpVolume" $root | nindent 4 }}
    {{- if .sealPrivateKey }}
    - name: seal
      secret:
        secretName: {{ include "gpuportal.sealSecretName" $root }}
        defaultMode: 0400
        items:
          - key: {{ ternary $root.Values.seal.existingSecretKey "private-key" (ne $root.Values.seal.existingSecret "") }}
            path: private-key
    {{- end }}
  {{- with $spec.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $spec.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $spec.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}
