package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/idemguard/idemguard/internal/config"
)

const (
	chartDir = repoRoot + "/deploy/helm/idemguard"
	// kubeVersion is the chart's lowest (Chart.yaml); a helm built from source assumes 1.20.
	kubeVersion = "1.30.0"
)

// everythingOn turns on every optional part of the chart.
var everythingOn = []string{
	"--set", "metrics.serviceMonitor.enabled=true",
	"--set", "metrics.prometheusRule.enabled=true",
	"--set", "stats.enabled=true",
}

func helm(t *testing.T) string {
	t.Helper()
	return needTool(t, "helm", "the chart tests run helm lint and helm template")
}

// rendered is the chart's output, each object decoded strictly into its Kubernetes API type.
type rendered struct {
	deployments    []*appsv1.Deployment
	services       []*corev1.Service
	configMaps     []*corev1.ConfigMap
	pdbs           []*policyv1.PodDisruptionBudget
	jobs           []*batchv1.Job
	cronJobs       []*batchv1.CronJob
	serviceMonitor []*monitoringv1.ServiceMonitor
	prometheusRule []*monitoringv1.PrometheusRule
	kinds          []string
}

// strict decodes one YAML document into v, rejecting unknown and duplicate fields.
func strict(t *testing.T, doc []byte, v any) {
	t.Helper()
	require.NoError(t, yaml.UnmarshalStrict(doc, v), "strict decode into %T:\n%s", v, doc)
}

// decodeInto decodes one rendered document strictly and appends it to into.
func decodeInto[T any](t *testing.T, doc []byte, into *[]*T) {
	t.Helper()
	var o T
	strict(t, doc, &o)
	*into = append(*into, &o)
}

func helmTemplate(t *testing.T, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(helm(t), append([]string{"template", "idemguard", chartDir, "--kube-version", kubeVersion}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "helm template %v: %s", args, stderr.String())
	return out
}

func render(t *testing.T, args ...string) *rendered {
	t.Helper()
	return decodeAll(t, helmTemplate(t, args...))
}

func decodeAll(t *testing.T, out []byte) *rendered {
	t.Helper()
	r := &rendered{}
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(out), -1) {
		var meta struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		require.NoError(t, yaml.Unmarshal([]byte(doc), &meta))
		if meta.Kind == "" {
			require.Empty(t, strings.TrimSpace(regexp.MustCompile(`(?m)^#.*$`).ReplaceAllString(doc, "")), "an object without a kind")
			continue
		}
		r.kinds = append(r.kinds, meta.Kind)
		b := []byte(doc)
		switch meta.APIVersion + " " + meta.Kind {
		case "apps/v1 Deployment":
			decodeInto(t, b, &r.deployments)
		case "v1 Service":
			decodeInto(t, b, &r.services)
		case "v1 ConfigMap":
			decodeInto(t, b, &r.configMaps)
		case "policy/v1 PodDisruptionBudget":
			decodeInto(t, b, &r.pdbs)
		case "batch/v1 Job":
			decodeInto(t, b, &r.jobs)
		case "batch/v1 CronJob":
			decodeInto(t, b, &r.cronJobs)
		case "monitoring.coreos.com/v1 ServiceMonitor":
			decodeInto(t, b, &r.serviceMonitor)
		case "monitoring.coreos.com/v1 PrometheusRule":
			decodeInto(t, b, &r.prometheusRule)
		default:
			t.Fatalf("the chart renders %s %s, which this test does not decode: add it", meta.APIVersion, meta.Kind)
		}
	}
	return r
}

// workload is one pod template of the chart with the name of its object.
type workload struct {
	name string
	pod  corev1.PodSpec
}

func (r *rendered) workloads() []workload {
	var w []workload
	for _, d := range r.deployments {
		w = append(w, workload{"Deployment " + d.Name, d.Spec.Template.Spec})
	}
	for _, j := range r.jobs {
		w = append(w, workload{"Job " + j.Name, j.Spec.Template.Spec})
	}
	for _, c := range r.cronJobs {
		w = append(w, workload{"CronJob " + c.Name, c.Spec.JobTemplate.Spec.Template.Spec})
	}
	return w
}

func TestHelmLint(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{nil, everythingOn} {
		cmd := exec.Command(helm(t), append([]string{"lint", "--strict", chartDir, "--kube-version", kubeVersion}, args...)...)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "helm lint %v:\n%s", args, out)
	}
}

// The chart with its defaults: the service, its config, its disruption budget, the migration
// hook and the cleanup; nothing that needs the Prometheus Operator.
func TestChartDefaults(t *testing.T) {
	t.Parallel()
	r := render(t)
	require.ElementsMatch(t, []string{"PodDisruptionBudget", "ConfigMap", "Service", "Service", "Deployment", "CronJob", "Job"}, r.kinds)
	checkChart(t, r)
}

// Other container ports: serve listens there (IDEMGUARD_LISTEN and IDEMGUARD_METRICS_LISTEN
// override the image's 8080 and 9090). The API and the operator listener never share one.
func TestChartOtherPort(t *testing.T) {
	t.Parallel()
	r := render(t, "--set", "containerPort=9090", "--set", "metrics.port=9191", "--set", "shutdownGraceSeconds=60")
	checkChart(t, r)
	require.Equal(t, int32(9090), r.deployments[0].Spec.Template.Spec.Containers[0].Ports[0].ContainerPort)
	require.Equal(t, int32(9191), r.deployments[0].Spec.Template.Spec.Containers[0].Ports[1].ContainerPort)
	require.Greater(t, *r.deployments[0].Spec.Template.Spec.TerminationGracePeriodSeconds, int64(60))

	cmd := exec.Command(helm(t), "template", "idemguard", chartDir, "--kube-version", kubeVersion, "--set", "containerPort=9090")
	out, err := cmd.CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), "needs a port apart from the API's")
}

// Every optional part on: the stats CronJob, the ServiceMonitor and the PrometheusRule.
func TestChartEverythingOn(t *testing.T) {
	t.Parallel()
	r := render(t, everythingOn...)
	require.ElementsMatch(t, []string{"PodDisruptionBudget", "ConfigMap", "Service", "Service", "Deployment", "CronJob", "CronJob", "Job",
		"ServiceMonitor", "PrometheusRule"}, r.kinds)
	checkChart(t, r)

	// The ServiceMonitor scrapes /metrics on the metrics Service's port (the operator listener),
	// never the API's Service.
	sm := r.serviceMonitor[0]
	require.Len(t, sm.Spec.Endpoints, 1)
	require.Equal(t, "/metrics", sm.Spec.Endpoints[0].Path)
	api, ops := serviceOf(t, r, "server"), serviceOf(t, r, "metrics")
	requireSelects(t, "the ServiceMonitor", sm.Spec.Selector.MatchLabels, ops.Labels)
	for k, v := range sm.Spec.Selector.MatchLabels {
		require.False(t, api.Labels[k] == v && k == "app.kubernetes.io/component", "the ServiceMonitor selects the API's Service")
	}
	require.Equal(t, "metrics", sm.Spec.Endpoints[0].Port)
	require.Equal(t, "metrics", ops.Spec.Ports[0].Name)

	// The PrometheusRule is docs/alerts.yaml.
	rules := r.prometheusRule[0]
	got, err := json.Marshal(rules.Spec)
	require.NoError(t, err)
	require.JSONEq(t, string(alertsAsJSON(t)), string(got), "the PrometheusRule differs from docs/alerts.yaml: run make manifests")
	require.NotEmpty(t, rules.Spec.Groups)
}

// alertsAsJSON is docs/alerts.yaml decoded strictly as a PrometheusRule's spec, as JSON.
func alertsAsJSON(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "docs", "alerts.yaml"))
	require.NoError(t, err)
	var spec monitoringv1.PrometheusRuleSpec
	strict(t, b, &spec)
	out, err := json.Marshal(spec)
	require.NoError(t, err)
	return out
}

// The chart's copy of docs/alerts.yaml is the file itself, byte for byte.
func TestChartAlertsAreDocsAlerts(t *testing.T) {
	t.Parallel()
	docs, err := os.ReadFile(filepath.Join(repoRoot, "docs", "alerts.yaml"))
	require.NoError(t, err)
	chart, err := os.ReadFile(filepath.Join(chartDir, "files", "alerts.yaml"))
	require.NoError(t, err)
	require.Equal(t, string(docs), string(chart), "deploy/helm/idemguard/files/alerts.yaml differs from docs/alerts.yaml: run make manifests")
}

// deploy/manifests/ is what the chart renders now (deploy/render-manifests, as make manifests runs it).
func TestManifestsAreRenderedFromTheChart(t *testing.T) {
	t.Parallel()
	h := helm(t)
	dir := t.TempDir()
	cmd := exec.Command(filepath.Join(repoRoot, "deploy", "render-manifests"), dir)
	cmd.Env = append(os.Environ(), "HELM="+h)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	want, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	require.NoError(t, err)
	have, err := filepath.Glob(filepath.Join(repoRoot, "deploy", "manifests", "*.yaml"))
	require.NoError(t, err)
	base := func(paths []string) (names []string) {
		for _, p := range paths {
			names = append(names, filepath.Base(p))
		}
		return names
	}
	require.Equal(t, base(want), base(have), "deploy/manifests/ holds other files than render-manifests writes")
	var all []byte
	for _, f := range want {
		w, err := os.ReadFile(f)
		require.NoError(t, err)
		h, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "manifests", filepath.Base(f)))
		require.NoError(t, err)
		require.Equal(t, string(w), string(h), "deploy/manifests/%s is stale: run make manifests", filepath.Base(f))
		all = append(append(all, w...), "\n---\n"...)
	}
	// The plain manifests are the chart with everything but the stats CronJob.
	r := decodeAll(t, all)
	require.ElementsMatch(t, []string{"Job", "PodDisruptionBudget", "ConfigMap", "Service", "Service", "Deployment", "CronJob",
		"ServiceMonitor", "PrometheusRule"}, r.kinds)
	migrate, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "manifests", "migrate-job.yaml"))
	require.NoError(t, err)
	require.Equal(t, []string{"Job"}, decodeAll(t, migrate).kinds, "migrate-job.yaml, applied first, holds the migration alone")
}

// checkChart holds the rendered chart to what an SRE expects of it and to the binary it runs.
func checkChart(t *testing.T, r *rendered) {
	t.Helper()
	require.Len(t, r.deployments, 1)
	require.Len(t, r.services, 2, "the API's and the operator listener's")
	require.Len(t, r.configMaps, 1)
	require.Len(t, r.pdbs, 1)
	require.Len(t, r.jobs, 1)
	d, svc, cm, pdb, migrate := r.deployments[0], serviceOf(t, r, "server"), r.configMaps[0], r.pdbs[0], r.jobs[0]
	opsSvc := serviceOf(t, r, "metrics")

	// Replicas, disruption budget, rollout.
	require.NotNil(t, d.Spec.Replicas)
	require.GreaterOrEqual(t, *d.Spec.Replicas, int32(2))
	require.NotNil(t, pdb.Spec.MaxUnavailable)
	require.Less(t, pdb.Spec.MaxUnavailable.IntValue(), int(*d.Spec.Replicas), "the budget keeps a replica up")
	podLabels := d.Spec.Template.Labels
	requireSelects(t, "the PodDisruptionBudget", pdb.Spec.Selector.MatchLabels, podLabels)
	requireSelects(t, "the Deployment", d.Spec.Selector.MatchLabels, podLabels)
	requireSelects(t, "the Service", svc.Spec.Selector, podLabels)
	require.Equal(t, intstr.Int, d.Spec.Strategy.RollingUpdate.MaxUnavailable.Type)
	require.Zero(t, d.Spec.Strategy.RollingUpdate.MaxUnavailable.IntValue(), "a rollout adds a pod before it takes one away")

	pod := d.Spec.Template.Spec
	require.Len(t, pod.Containers, 1)
	c := pod.Containers[0]
	require.Equal(t, []string{"serve"}, c.Args)
	port := func(name string) int32 {
		for _, p := range c.Ports {
			if p.Name == name {
				return p.ContainerPort
			}
		}
		t.Fatalf("the container has no port named %q", name)
		return 0
	}
	require.Equal(t, "http", svc.Spec.Ports[0].TargetPort.String())
	require.Len(t, svc.Spec.Ports, 1, "the API's Service carries the API only")
	port("http")
	requireSelects(t, "the metrics Service", opsSvc.Spec.Selector, d.Spec.Template.Labels)
	require.Equal(t, "metrics", opsSvc.Spec.Ports[0].TargetPort.String())
	port("metrics")

	// Probes: ready on /readyz (database reachable, schema migrated), alive on /healthz (the
	// process answers; a database outage must not restart every pod).
	require.NotNil(t, c.ReadinessProbe)
	require.NotNil(t, c.ReadinessProbe.HTTPGet)
	require.Equal(t, "/readyz", c.ReadinessProbe.HTTPGet.Path)
	require.Equal(t, "http", c.ReadinessProbe.HTTPGet.Port.String())
	require.NotNil(t, c.LivenessProbe)
	require.NotNil(t, c.LivenessProbe.HTTPGet)
	require.Equal(t, "/healthz", c.LivenessProbe.HTTPGet.Path)
	require.Equal(t, "http", c.LivenessProbe.HTTPGet.Port.String())

	// The config file: mounted where IDEMGUARD_CONFIG points, and valid for the binary in
	// production mode with the Secrets' values in the environment.
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
			env[e.Name] = fakeSecret(t, e.Name)
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		default:
			t.Fatalf("env %s comes from neither a value nor a Secret", e.Name)
		}
	}
	cfgPath := env[config.EnvConfig]
	require.NotEmpty(t, cfgPath, "serve's container sets %s", config.EnvConfig)
	var mount *corev1.VolumeMount
	for i := range c.VolumeMounts {
		if c.VolumeMounts[i].MountPath == filepath.Dir(cfgPath) {
			mount = &c.VolumeMounts[i]
		}
	}
	require.NotNil(t, mount, "nothing is mounted at %s", filepath.Dir(cfgPath))
	require.True(t, mount.ReadOnly)
	vol := slices.IndexFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == mount.Name })
	require.GreaterOrEqual(t, vol, 0)
	require.NotNil(t, pod.Volumes[vol].ConfigMap)
	require.Equal(t, cm.Name, pod.Volumes[vol].ConfigMap.Name)
	file := filepath.Join(t.TempDir(), filepath.Base(cfgPath))
	require.Contains(t, cm.Data, filepath.Base(cfgPath))
	require.NoError(t, os.WriteFile(file, []byte(cm.Data[filepath.Base(cfgPath)]), 0o600))
	cfg, err := config.Load(file, func(k string) string { return env[k] })
	require.NoError(t, err, "the chart's config does not load:\n%s", cm.Data[filepath.Base(cfgPath)])
	require.Equal(t, config.Production, cfg.Mode)
	_, listenPort, err := splitPort(cfg.Listen)
	require.NoError(t, err)
	require.Equal(t, port("http"), listenPort, "serve listens on the container port")
	require.NotContains(t, cfg.Listen, "127.0.0.1", "serve listens beyond loopback in a pod")
	_, metricsPort, err := splitPort(cfg.MetricsListen)
	require.NoError(t, err)
	require.Equal(t, port("metrics"), metricsPort, "the operator listener is on the metrics port")
	require.NotEqual(t, listenPort, metricsPort)

	// Graceful shutdown: preStop lets the endpoints drain, then SIGTERM gives requests
	// shutdown_grace; the pod is killed only after both, with room for the answers to drain.
	require.NotNil(t, c.Lifecycle)
	require.NotNil(t, c.Lifecycle.PreStop)
	require.NotNil(t, c.Lifecycle.PreStop.Sleep, "preStop sleeps (the image has no shell)")
	preStop := time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
	require.GreaterOrEqual(t, preStop, 3*time.Second, "endpoints need seconds to drain")
	require.NotNil(t, pod.TerminationGracePeriodSeconds)
	grace := time.Duration(*pod.TerminationGracePeriodSeconds) * time.Second
	require.Greater(t, grace, preStop+cfg.ShutdownGrace+2*time.Second,
		"terminationGracePeriodSeconds (%s) must exceed preStop (%s) + shutdown_grace (%s) and the drain", grace, preStop, cfg.ShutdownGrace)

	// Resources.
	require.False(t, c.Resources.Requests.Cpu().IsZero())
	require.False(t, c.Resources.Requests.Memory().IsZero())
	require.False(t, c.Resources.Limits.Memory().IsZero())

	// The migration runs first: a pre-install and pre-upgrade hook (Helm waits for it before it
	// applies the Deployment), and the Deployment is no hook.
	hooks := strings.Split(migrate.Annotations["helm.sh/hook"], ",")
	require.ElementsMatch(t, []string{"pre-install", "pre-upgrade"}, hooks)
	require.Empty(t, d.Annotations["helm.sh/hook"])
	for _, cj := range r.cronJobs {
		require.Empty(t, cj.Annotations["helm.sh/hook"])
	}
	require.Equal(t, []string{"migrate", "up"}, migrate.Spec.Template.Spec.Containers[0].Args)
	require.Equal(t, corev1.RestartPolicyNever, migrate.Spec.Template.Spec.RestartPolicy)

	// Least privilege: serve, the migration and the cleanup read their DSN from three different
	// Secrets (the service user, the schema's owner, the operations user of docs/OPERATIONS.md).
	dsnSecret := func(c corev1.Container) string {
		for _, e := range c.Env {
			if e.Name == config.EnvMySQLDSN {
				require.NotNil(t, e.ValueFrom, "%s comes from a Secret", e.Name)
				require.NotNil(t, e.ValueFrom.SecretKeyRef, "%s comes from a Secret", e.Name)
				return e.ValueFrom.SecretKeyRef.Name
			}
		}
		t.Fatalf("container %s has no %s", c.Name, config.EnvMySQLDSN)
		return ""
	}
	serveSecret, migrateSecret := dsnSecret(c), dsnSecret(migrate.Spec.Template.Spec.Containers[0])
	require.NotEqual(t, serveSecret, migrateSecret)
	var cleanup *batchv1.CronJob
	for _, cj := range r.cronJobs {
		cc := cj.Spec.JobTemplate.Spec.Template.Spec.Containers[0]
		s := dsnSecret(cc)
		require.NotEqual(t, serveSecret, s, "%s runs as the operations user", cj.Name)
		require.NotEqual(t, migrateSecret, s, "%s runs as the operations user", cj.Name)
		if cc.Args[0] == "cleanup" {
			cleanup = cj
		}
	}
	require.NotNil(t, cleanup, "the cleanup CronJob")
	require.Equal(t, batchv1.ForbidConcurrent, cleanup.Spec.ConcurrencyPolicy)
	require.Equal(t, "0 3 * * *", cleanup.Spec.Schedule)

	// Every pod: non-root, read-only root filesystem, no privilege, no service-account token,
	// the image the chart names, and only flags and environment variables the binary knows.
	image := r.deployments[0].Spec.Template.Spec.Containers[0].Image
	require.Regexp(t, `^ghcr\.io/idemguard/idemguard:\S+$`, image)
	flags, envs := binaryFlags(t), configEnvNames(t)
	for _, w := range r.workloads() {
		require.NotNil(t, w.pod.AutomountServiceAccountToken, w.name)
		require.False(t, *w.pod.AutomountServiceAccountToken, "%s: no service-account token (serve never calls the Kubernetes API)", w.name)
		require.NotNil(t, w.pod.SecurityContext, w.name)
		require.NotNil(t, w.pod.SecurityContext.RunAsNonRoot, w.name)
		require.True(t, *w.pod.SecurityContext.RunAsNonRoot, w.name)
		require.NotNil(t, w.pod.SecurityContext.RunAsUser, w.name)
		require.Equal(t, imageUser(t), *w.pod.SecurityContext.RunAsUser, "%s runs as the image's user", w.name)
		for _, c := range w.pod.Containers {
			sc := c.SecurityContext
			require.NotNil(t, sc, w.name)
			require.NotNil(t, sc.ReadOnlyRootFilesystem, w.name)
			require.True(t, *sc.ReadOnlyRootFilesystem, "%s: read-only root filesystem", w.name)
			require.NotNil(t, sc.AllowPrivilegeEscalation, w.name)
			require.False(t, *sc.AllowPrivilegeEscalation, w.name)
			require.NotNil(t, sc.Capabilities, w.name)
			require.Equal(t, []corev1.Capability{"ALL"}, sc.Capabilities.Drop, w.name)
			require.Equal(t, image, c.Image, w.name)
			require.Empty(t, c.Command, "%s: the image's entrypoint runs", w.name)
			require.NotEmpty(t, c.Args, w.name)

			sub := c.Args[0]
			known, ok := flags[sub]
			require.True(t, ok, "%s runs `idemguard %s`, which is no subcommand of the binary", w.name, sub)
			for _, a := range c.Args[1:] {
				if !strings.HasPrefix(a, "-") {
					continue
				}
				name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
				require.Contains(t, known, name, "%s passes %s, which `idemguard %s` does not define", w.name, a, sub)
			}
			require.NotEmpty(t, c.Env, w.name)
			for _, e := range c.Env {
				require.Contains(t, envs, e.Name, "%s sets %s, which the binary's configuration does not read", w.name, e.Name)
			}
		}
	}
}

func requireSelects(t *testing.T, what string, selector, labels map[string]string) {
	t.Helper()
	require.NotEmpty(t, selector, what)
	for k, v := range selector {
		require.Equal(t, v, labels[k], "%s selects %s=%s, which the pods do not carry", what, k, v)
	}
}

func splitPort(hostport string) (string, int32, error) {
	i := strings.LastIndex(hostport, ":")
	if i < 0 {
		return "", 0, fmt.Errorf("no port in %q", hostport)
	}
	p, err := strconv.ParseInt(hostport[i+1:], 10, 32)
	return hostport[:i], int32(p), err
}

// fakeSecret is a value of the right shape for a variable the chart takes from a Secret.
func fakeSecret(t *testing.T, name string) string {
	t.Helper()
	switch name {
	case config.EnvSecret:
		return strings.Repeat("s", 32)
	case config.EnvMySQLDSN:
		return "idemguard_app:password@tcp(mysql:3306)/idemguard"
	case config.EnvAPIKeys:
		return "acme:" + strings.Repeat("ab", 32)
	case config.EnvPreviousSecrets:
		return "2026-05:" + strings.Repeat("p", 32)
	case config.EnvOpenAIAPIKey:
		return "sk-test"
	}
	t.Fatalf("the chart takes %s from a Secret: give the test a value of its shape", name)
	return ""
}

// imageUser is the uid of deploy/Dockerfile's USER line.
func imageUser(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "Dockerfile"))
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^USER (\d+)(?::\d+)?\s*$`).FindSubmatch(b)
	require.NotNil(t, m, "deploy/Dockerfile has no numeric USER line")
	uid, err := strconv.ParseInt(string(m[1]), 10, 64)
	require.NoError(t, err)
	require.NotZero(t, uid)
	return uid
}

// binaryFlags is, per subcommand, the flags the binary defines: what `idemguard <cmd> -h`
// prints from each command's own flag set.
func binaryFlags(t *testing.T) map[string][]string {
	t.Helper()
	bin := binary(t)
	out, err := exec.Command(bin, "help").Output()
	require.NoError(t, err)
	subs := regexp.MustCompile(`(?m)^  ([a-z]+)\s`).FindAllStringSubmatch(string(out), -1)
	require.NotEmpty(t, subs, "idemguard help lists no command:\n%s", out)
	flags := map[string][]string{}
	for _, s := range subs {
		cmd := exec.Command(bin, s[1], "-h")
		usage, _ := cmd.CombinedOutput() // -h exits 0 (or 2 for a command without flags)
		flags[s[1]] = nil
		for _, m := range regexp.MustCompile(`(?m)^  -([a-zA-Z0-9-]+)`).FindAllStringSubmatch(string(usage), -1) {
			flags[s[1]] = append(flags[s[1]], m[1])
		}
	}
	require.Contains(t, flags["cleanup"], "max-duration", "the flags were not found in cleanup -h")
	return flags
}

// configEnvNames is every environment variable the binary's configuration names: the string
// constants Env* of internal/config and of cmd/idemguard, read from their source.
func configEnvNames(t *testing.T) []string {
	t.Helper()
	var names []string
	for _, dir := range []string{"internal/config", "cmd/idemguard"} {
		fset := token.NewFileSet()
		files, err := filepath.Glob(filepath.Join(repoRoot, dir, "*.go"))
		require.NoError(t, err)
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			file, err := parser.ParseFile(fset, f, nil, 0)
			require.NoError(t, err)
			for _, decl := range file.Decls {
				gd, ok := decl.(*ast.GenDecl)
				if !ok || gd.Tok != token.CONST {
					continue
				}
				for _, spec := range gd.Specs {
					vs := spec.(*ast.ValueSpec)
					for i, n := range vs.Names {
						if !strings.HasPrefix(n.Name, "Env") || i >= len(vs.Values) {
							continue
						}
						if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							v, err := strconv.Unquote(lit.Value)
							require.NoError(t, err)
							names = append(names, v)
						}
					}
				}
			}
		}
	}
	require.Contains(t, names, config.EnvSecret, "the Env* constants were not found")
	require.Contains(t, names, config.EnvMySQLDSN)
	return names
}

// serviceOf is the rendered Service of component (server: the API's; metrics: the operator
// listener's).
func serviceOf(t *testing.T, r *rendered, component string) *corev1.Service {
	t.Helper()
	for _, s := range r.services {
		if s.Labels["app.kubernetes.io/component"] == component {
			return s
		}
	}
	t.Fatalf("no Service of component %q", component)
	return nil
}
