package deploy

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/consumers/roster"
)

// The manifests under kubernetes/: rendered with kustomize's krusty (as
// `kubectl apply -k` does), every object decoded strictly into the
// Kubernetes and Prometheus Operator API types (an unknown field or kind
// fails), then checked as a reviewer would (checkManifests).

var update = flag.Bool("update", false, "write kubernetes/base/prometheusrule.yaml from prometheus/alerts.yml")

const (
	baseDir    = "kubernetes/base"
	overlayDir = "kubernetes/overlays/example"
	// maxHeapShare bounds GOMEMLIMIT against the container's memory limit:
	// librdkafka's prefetch and buffers are C memory, outside the Go heap.
	maxHeapShare = 0.8
)

// allowedEgress is every port the NetworkPolicy may open: DNS, Kafka
// (plaintext, TLS; TLS and SASL on managed brokers), PostgreSQL, PgBouncer,
// OTLP/HTTP.
var allowedEgress = []string{"UDP/53", "TCP/53", "TCP/9092", "TCP/9093", "TCP/9094", "TCP/9096", "TCP/5432", "TCP/6432", "TCP/4318"}

// goRuntimeEnv are the Go runtime's own variables a Deployment may set
// (docs/operations.md, GOGC and GOMEMLIMIT).
var goRuntimeEnv = []string{"GOGC", "GOMEMLIMIT"}

// manifests are the objects of one rendering, by kind.
type manifests struct {
	deployments     []*appsv1.Deployment
	pdbs            []*policyv1.PodDisruptionBudget
	jobs            []*batchv1.Job
	podMonitors     []*monitoringv1.PodMonitor
	rules           []*monitoringv1.PrometheusRule
	networkPolicies []*networkingv1.NetworkPolicy
	configMaps      []*corev1.ConfigMap
}

var decoder = func() runtime.Decoder {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{appsv1.AddToScheme, batchv1.AddToScheme, corev1.AddToScheme,
		networkingv1.AddToScheme, policyv1.AddToScheme, monitoringv1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return serializer.NewCodecFactory(s, serializer.EnableStrict).UniversalDeserializer()
}()

// render builds the kustomization in dir and decodes every object.
func render(t *testing.T, dir string) manifests {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	res, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	var m manifests
	for _, r := range res.Resources() {
		y, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		obj, _, err := decoder.Decode(y, nil, nil)
		if err != nil {
			t.Fatalf("%s: %s %s: %v", dir, r.GetKind(), r.GetName(), err)
		}
		switch o := obj.(type) {
		case *appsv1.Deployment:
			m.deployments = append(m.deployments, o)
		case *policyv1.PodDisruptionBudget:
			m.pdbs = append(m.pdbs, o)
		case *batchv1.Job:
			m.jobs = append(m.jobs, o)
		case *monitoringv1.PodMonitor:
			m.podMonitors = append(m.podMonitors, o)
		case *monitoringv1.PrometheusRule:
			m.rules = append(m.rules, o)
		case *networkingv1.NetworkPolicy:
			m.networkPolicies = append(m.networkPolicies, o)
		case *corev1.ConfigMap:
			m.configMaps = append(m.configMaps, o)
		default:
			t.Errorf("%s: %s %s: a kind the checks do not cover", dir, r.GetKind(), r.GetName())
		}
	}
	return m
}

// makeImage is the image `make image` tags (the Makefile's IMAGE), without
// its tag.
func makeImage(t *testing.T) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^IMAGE\s*\?=\s*(\S+)\s*$`).FindStringSubmatch(readFile(t, filepath.Join("..", "Makefile")))
	if m == nil {
		t.Fatal("the Makefile sets no IMAGE")
	}
	return m[1]
}

// overlayImage is the image reference the example overlay sets.
func overlayImage(t *testing.T) string {
	t.Helper()
	var k struct {
		Images []struct {
			Name, NewName, NewTag string
		}
	}
	if err := sigsyaml.Unmarshal([]byte(readFile(t, filepath.Join(overlayDir, "kustomization.yaml"))), &k); err != nil {
		t.Fatal(err)
	}
	want := makeImage(t)
	for _, i := range k.Images {
		if i.Name == want {
			if !strings.HasSuffix(i.NewName, "/"+want) || i.NewTag == "" || i.NewTag == "latest" {
				t.Errorf("the overlay's image %s:%s: want <registry>/%s:<version>", i.NewName, i.NewTag, want)
			}
			return i.NewName + ":" + i.NewTag
		}
	}
	t.Fatalf("the overlay sets no image for %s", want)
	return ""
}

// acceptedEnv is what a consumer binary reads: the declared variables
// (declaredEnv), the KAFKA_* and OTEL_* families, and the Go runtime's own.
func acceptedEnv(t *testing.T) func(name string) bool {
	t.Helper()
	names := map[string]bool{}
	for _, v := range declaredEnv(t) {
		names[v.Name] = true
	}
	return func(name string) bool {
		return names[name] || slices.Contains(goRuntimeEnv, name) ||
			strings.HasPrefix(name, "KAFKA_") || strings.HasPrefix(name, "OTEL_")
	}
}

// want is what the manifests are checked against.
type want struct {
	image    string // every container's
	accepted func(string) bool
}

func TestKubernetesManifests(t *testing.T) {
	w := want{image: makeImage(t), accepted: acceptedEnv(t)}
	for _, p := range checkManifests(render(t, baseDir), w) {
		t.Errorf("%s: %s", baseDir, p)
	}
	w.image = overlayImage(t)
	for _, p := range checkManifests(render(t, overlayDir), w) {
		t.Errorf("%s: %s", overlayDir, p)
	}
}

// TestKubernetesChecksCatchBrokenManifests renders the example overlay
// with one breaking patch at a time on top and wants the checks to name
// each break.
func TestKubernetesChecksCatchBrokenManifests(t *testing.T) {
	overlay, err := filepath.Abs(overlayDir)
	if err != nil {
		t.Fatal(err)
	}
	w := want{image: overlayImage(t), accepted: acceptedEnv(t)}
	container := func(op string) string {
		return `[{"op": "replace", "path": "/spec/template/spec/containers/0/` + op + `}]`
	}
	for _, c := range []struct {
		name, kind, target, patch, problem string
	}{
		{"a liveness probe on another port", "Deployment", "rewards-consumers",
			container(`livenessProbe/httpGet/port", "value": 9999`), "liveness probe on port 9999, HTTP_ADDR is 9091"},
		{"a readiness probe on another port", "Deployment", "crm-consumers",
			container(`readinessProbe/httpGet/port", "value": 9090`), "readiness probe on port 9090, HTTP_ADDR is 9092"},
		{"HTTP_ADDR moved, the port not", "Deployment", "messenger-consumers",
			container(`env/2", "value": {"name": "HTTP_ADDR", "value": ":8080"}`), "on port 9090, HTTP_ADDR is 8080"},
		{"a grace period below the drain timeout", "Deployment", "rewards-consumers",
			`[{"op": "replace", "path": "/spec/template/spec/terminationGracePeriodSeconds", "value": 5}]`, "terminationGracePeriodSeconds 5s"},
		{"Kubernetes' default grace period", "Deployment", "messenger-consumers",
			`[{"op": "replace", "path": "/spec/template/spec/terminationGracePeriodSeconds", "value": 30}]`, "a stop may take 47s"},
		{"a readiness probe that gives up before /readyz", "Deployment", "crm-consumers",
			container(`readinessProbe/timeoutSeconds", "value": 1`), "readiness probe timeoutSeconds 1"},
		{"a disruption budget that blocks drains while unready", "PodDisruptionBudget", "rewards-consumers",
			`[{"op": "remove", "path": "/spec/unhealthyPodEvictionPolicy"}]`, "unhealthyPodEvictionPolicy is not AlwaysAllow"},
		{"a drain timeout raised past the grace period", "Deployment", "crm-consumers",
			container(`env/3", "value": {"name": "CONSUMER_DRAIN_TIMEOUT", "value": "25s"}`), "CONSUMER_DRAIN_TIMEOUT 25s"},
		{"a variable no binary reads", "Deployment", "messenger-consumers",
			`[{"op": "add", "path": "/spec/template/spec/containers/0/env/-", "value": {"name": "CONSUMER_BATCHSIZE", "value": "10"}}]`, "CONSUMER_BATCHSIZE is not a variable"},
		{"a variable renamed away", "Deployment", "messenger-consumers",
			`[{"op": "add", "path": "/spec/template/spec/containers/0/env/-", "value": {"name": "CONSUMER_SHARED_TRANSACTIONS", "value": "2"}}]`, "warns"},
		{"GOMEMLIMIT at the limit", "Deployment", "rewards-consumers",
			container(`env/4", "value": {"name": "GOMEMLIMIT", "value": "128MiB"}`), "GOMEMLIMIT 134217728"},
		{"more instances than partitions", "Deployment", "messenger-consumers",
			`[{"op": "replace", "path": "/spec/replicas", "value": 4}]`, "4 replicas, 3 partitions"},
		{"another image", "Deployment", "crm-consumers",
			container(`image", "value": "pin-consumers:latest"`), "image pin-consumers:latest"},
		{"the owner's login", "Deployment", "crm-consumers",
			container(`env/1/valueFrom/secretKeyRef/name", "value": "pin-owner-db"`), "pin-owner-db"},
		{"writable root", "Deployment", "rewards-consumers",
			container(`securityContext/readOnlyRootFilesystem", "value": false`), "readOnlyRootFilesystem"},
		{"service links", "Deployment", "rewards-consumers",
			`[{"op": "replace", "path": "/spec/template/spec/enableServiceLinks", "value": true}]`, "enableServiceLinks"},
		{"an alert dropped", "PrometheusRule", "pin-consumers",
			`[{"op": "remove", "path": "/spec/groups/0/rules/0"}]`, "differs from prometheus/alerts.yml"},
		{"egress opened", "NetworkPolicy", "pin-consumers",
			`[{"op": "add", "path": "/spec/egress/-", "value": {"ports": [{"protocol": "TCP", "port": 443}]}}]`, "TCP/443"},
		{"the migration as a service", "Job", "pin-migrate",
			container(`env/0/valueFrom/secretKeyRef/name", "value": "pin-rewards-db"`), "pin-rewards-db"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			rel, err := filepath.Rel(dir, overlay) // kustomize takes no absolute path
			if err != nil {
				t.Fatal(err)
			}
			k := fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - %s
patches:
  - target:
      kind: %s
      name: %s
    patch: |-
      %s
`, rel, c.kind, c.target, c.patch)
			if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
				t.Fatal(err)
			}
			problems := checkManifests(render(t, dir), w)
			if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, c.problem) }) {
				t.Errorf("no problem mentions %q; the checks said:\n%s", c.problem, strings.Join(problems, "\n"))
			}
		})
	}
}

// checkManifests returns what is wrong with m, one line each.
func checkManifests(m manifests, w want) []string {
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }

	secrets := map[string]string{} // the DATABASE_URL secret → who uses it
	for _, s := range roster.All {
		var d *appsv1.Deployment
		for _, c := range m.deployments {
			if c.Name == s.Binary() {
				d = c
			}
		}
		if d == nil {
			bad("no Deployment %s", s.Binary())
			continue
		}
		where := "Deployment " + d.Name
		at := func(format string, args ...any) { bad(where+": "+format, args...) }
		spec := d.Spec.Template.Spec
		problems = append(problems, checkPod(where, spec, w.image)...)
		if len(spec.Containers) != 1 {
			at("%d containers, want 1", len(spec.Containers))
			continue
		}
		c := spec.Containers[0]
		if !slices.Equal(c.Command, []string{s.Binary()}) {
			at("command %q, want [%s]", c.Command, s.Binary())
		}
		if r := d.Spec.Replicas; r == nil || *r < 1 || int(*r) > s.Partitions {
			n := "unset"
			if r != nil {
				n = strconv.Itoa(int(*r))
			}
			at("%s replicas, %d partitions: more instances than partitions stay idle", n, s.Partitions)
		}

		// The environment: names the binary reads, values it accepts.
		environ := []string{}
		for _, e := range c.Env {
			if !w.accepted(e.Name) {
				at("%s is not a variable the consumers read (consumer.ConfigVars)", e.Name)
			}
			v := e.Value
			switch {
			case e.ValueFrom == nil:
			case e.ValueFrom.ConfigMapKeyRef != nil && configMapValue(m.configMaps, e.ValueFrom.ConfigMapKeyRef) != "":
				v = configMapValue(m.configMaps, e.ValueFrom.ConfigMapKeyRef)
			case e.Name == "DATABASE_URL":
				v = "postgres://login@db/pin" // a Secret's: the cluster's
			default:
				v = "x" // a ConfigMap's that is not in the rendering, a field's
			}
			environ = append(environ, e.Name+"="+v)
		}
		if len(c.EnvFrom) > 0 {
			at("envFrom: every variable must be named, for these checks")
		}
		cfg, err := consumer.ConfigFromEnv(environ, s.Addr())
		if err != nil {
			at("the consumer refuses its environment: %v", err)
		}
		for _, warning := range cfg.Warnings {
			at("the consumer warns: %s", warning)
		}
		if ref := secretRef(c.Env, "DATABASE_URL"); ref == "" {
			at("DATABASE_URL is not from a Secret")
		} else {
			if other, ok := secrets[ref]; ok {
				at("shares the Secret %s with %s: each service logs in as its own role", ref, other)
			}
			secrets[ref] = where
		}

		// The HTTP port: probes and the scraped port are HTTP_ADDR's.
		_, portText, err := net.SplitHostPort(cfg.HTTPAddr)
		httpPort, _ := strconv.Atoi(portText)
		if err != nil || httpPort == 0 {
			at("HTTP_ADDR %q has no port", cfg.HTTPAddr)
		}
		ports := map[string]int32{}
		for _, p := range c.Ports {
			ports[p.Name] = p.ContainerPort
		}
		if ports["http"] != int32(httpPort) {
			at("container port http is %d, HTTP_ADDR is %d", ports["http"], httpPort)
		}
		for _, p := range []struct {
			name, path string
			probe      *corev1.Probe
		}{{"liveness", "/healthz", c.LivenessProbe}, {"readiness", "/readyz", c.ReadinessProbe}} {
			if p.probe == nil || p.probe.HTTPGet == nil {
				at("no %s probe (%s)", p.name, p.path)
				continue
			}
			if p.probe.HTTPGet.Path != p.path {
				at("%s probe on %s, want %s", p.name, p.probe.HTTPGet.Path, p.path)
			}
			port := p.probe.HTTPGet.Port
			n := port.IntVal
			if port.Type == intstr.String {
				n = ports[port.StrVal]
			}
			if n != int32(httpPort) {
				at("%s probe on port %d, HTTP_ADDR is %d", p.name, n, httpPort)
			}
		}
		// /readyz waits up to ReadyPingBudget for PostgreSQL: a probe that
		// gives up sooner fails a pod the consumer calls ready.
		if p := c.ReadinessProbe; p != nil && time.Duration(max(p.TimeoutSeconds, 1))*time.Second <= consumer.ReadyPingBudget {
			at("readiness probe timeoutSeconds %d, /readyz may take %s to answer", max(p.TimeoutSeconds, 1), consumer.ReadyPingBudget)
		}

		// Shutdown: every step of a stop at its bound.
		grace := 30 * time.Second // Kubernetes' default
		if g := spec.TerminationGracePeriodSeconds; g != nil {
			grace = time.Duration(*g) * time.Second
		}
		if bound := consumer.ShutdownBound(cfg.DrainTimeout); grace < bound {
			at("terminationGracePeriodSeconds %s, CONSUMER_DRAIN_TIMEOUT %s: a stop may take %s, or the pod is killed mid-stop",
				grace, cfg.DrainTimeout, bound)
		}

		// Memory: GOMEMLIMIT under the limit.
		limit := c.Resources.Limits.Memory()
		if limit.IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Requests.Cpu().IsZero() {
			at("no memory limit, memory request or CPU request")
		} else if v := envValue(c.Env, "GOMEMLIMIT"); v == "" {
			at("no GOMEMLIMIT: Go's heap does not know the limit of %s", limit)
		} else if n, ok := goBytes(v); !ok || float64(n) > maxHeapShare*float64(limit.Value()) {
			at("GOMEMLIMIT %d (%s) is not at most %.0f %% of the memory limit %s", n, v, 100*maxHeapShare, limit)
		}

		// Disruptions and scraping.
		podLabels := labels.Set(d.Spec.Template.Labels)
		pdb := slices.IndexFunc(m.pdbs, func(p *policyv1.PodDisruptionBudget) bool { return selects(p.Spec.Selector, podLabels) })
		switch {
		case pdb < 0:
			at("no PodDisruptionBudget selects its pods")
		case m.pdbs[pdb].Spec.UnhealthyPodEvictionPolicy == nil || *m.pdbs[pdb].Spec.UnhealthyPodEvictionPolicy != policyv1.AlwaysAllow:
			// Every pod is unready while PostgreSQL is down: the default
			// policy would refuse every eviction, and a node drain waits.
			at("PodDisruptionBudget %s: unhealthyPodEvictionPolicy is not AlwaysAllow", m.pdbs[pdb].Name)
		}
		scraped := false
		for _, pm := range m.podMonitors {
			if !selects(&pm.Spec.Selector, podLabels) {
				continue
			}
			scraped = true
			if job := podLabels[pm.Spec.JobLabel]; job != s.Binary() {
				at("PodMonitor %s names its job %q, alerts.yml expects %s", pm.Name, job, s.Binary())
			}
			for _, e := range pm.Spec.PodMetricsEndpoints {
				if e.Port == nil || ports[*e.Port] != int32(httpPort) {
					at("PodMonitor %s scrapes a port that is not HTTP_ADDR's", pm.Name)
				}
			}
		}
		if !scraped {
			at("no PodMonitor selects its pods")
		}
		problems = append(problems, checkEgress(where, m.networkPolicies, podLabels)...)
	}
	if len(m.deployments) != len(roster.All) {
		bad("%d Deployments, the roster has %d services", len(m.deployments), len(roster.All))
	}

	// The migration Job: pinctl migrate apply, as the owner.
	if len(m.jobs) != 1 {
		bad("%d Jobs, want the migration's", len(m.jobs))
	}
	for _, j := range m.jobs {
		where := "Job " + j.Name
		spec := j.Spec.Template.Spec
		problems = append(problems, checkPod(where, spec, w.image)...)
		problems = append(problems, checkEgress(where, m.networkPolicies, labels.Set(j.Spec.Template.Labels))...)
		for _, c := range spec.Containers {
			if !slices.Equal(c.Command, []string{"pinctl", "migrate", "apply"}) {
				bad("%s: command %q, want pinctl migrate apply", where, c.Command)
			}
			ref := secretRef(c.Env, "DATABASE_URL")
			if ref == "" {
				bad("%s: DATABASE_URL is not from a Secret", where)
			} else if other, ok := secrets[ref]; ok {
				bad("%s: migrates with the Secret %s of %s: the migrations run as the owner", where, ref, other)
			}
		}
	}

	// The alert rules: alerts.yml, exactly.
	if len(m.rules) != 1 {
		bad("%d PrometheusRules, want 1", len(m.rules))
	}
	for _, r := range m.rules {
		if err := sameAsAlerts(r.Spec); err != nil {
			bad("PrometheusRule %s differs from prometheus/alerts.yml: %v", r.Name, err)
		}
	}
	return problems
}

// checkPod checks what every pod of the consumers must be: the image, a
// numeric non-root user, a read-only root, no privilege escalation, no
// capability, seccomp RuntimeDefault, no service links.
func checkPod(where string, spec corev1.PodSpec, image string) []string {
	var problems []string
	at := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(where+": "+format, args...)) }
	if spec.EnableServiceLinks == nil || *spec.EnableServiceLinks {
		at("enableServiceLinks is not false: a Service named kafka would inject KAFKA_PORT…")
	}
	psc := spec.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	for _, c := range spec.Containers {
		at := func(format string, args ...any) { at("container "+c.Name+": "+format, args...) }
		if c.Image != image {
			at("image %s, want %s (make image)", c.Image, image)
		}
		sc := c.SecurityContext
		if sc == nil {
			sc = &corev1.SecurityContext{}
		}
		nonRoot, user, seccomp := psc.RunAsNonRoot, psc.RunAsUser, psc.SeccompProfile
		if sc.RunAsNonRoot != nil {
			nonRoot = sc.RunAsNonRoot
		}
		if sc.RunAsUser != nil {
			user = sc.RunAsUser
		}
		if sc.SeccompProfile != nil {
			seccomp = sc.SeccompProfile
		}
		if nonRoot == nil || !*nonRoot || user == nil || *user == 0 {
			at("not runAsNonRoot with a numeric runAsUser other than 0")
		}
		if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
			at("seccomp profile is not RuntimeDefault")
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			at("readOnlyRootFilesystem is not true")
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			at("allowPrivilegeEscalation is not false")
		}
		if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 {
			at("capabilities: want drop [ALL] and none added")
		}
		if sc.Privileged != nil && *sc.Privileged {
			at("privileged")
		}
	}
	return problems
}

// checkEgress wants a NetworkPolicy on the pods labelled pod that limits
// their egress to allowedEgress, every rule naming its ports.
func checkEgress(where string, nps []*networkingv1.NetworkPolicy, pod labels.Set) []string {
	var problems []string
	found := false
	for _, np := range nps {
		if !selects(&np.Spec.PodSelector, pod) || !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) {
			continue
		}
		found = true
		for _, r := range np.Spec.Egress {
			if len(r.Ports) == 0 {
				problems = append(problems, fmt.Sprintf("%s: NetworkPolicy %s has an egress rule open to every port", where, np.Name))
			}
			for _, p := range r.Ports {
				proto := corev1.ProtocolTCP
				if p.Protocol != nil {
					proto = *p.Protocol
				}
				port := fmt.Sprintf("%s/%s", proto, p.Port)
				if p.Port == nil || p.EndPort != nil || !slices.Contains(allowedEgress, port) {
					problems = append(problems, fmt.Sprintf("%s: NetworkPolicy %s opens egress to %s: want only %v (DNS, Kafka, PostgreSQL)",
						where, np.Name, port, allowedEgress))
				}
			}
		}
	}
	if !found {
		problems = append(problems, where+": no NetworkPolicy limits its egress")
	}
	return problems
}

// sameAsAlerts compares a PrometheusRule's spec, as the typed decoding left
// it, with prometheus/alerts.yml.
func sameAsAlerts(spec monitoringv1.PrometheusRuleSpec) error {
	b, err := os.ReadFile(filepath.Join("prometheus", "alerts.yml"))
	if err != nil {
		return err
	}
	var want, got any
	if err := sigsyaml.Unmarshal(b, &want); err != nil {
		return err
	}
	j, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(j, &got); err != nil {
		return err
	}
	if !reflect.DeepEqual(got, want) {
		g, _ := sigsyaml.Marshal(got)
		return fmt.Errorf("the rule's groups are\n%s", g)
	}
	return nil
}

// TestPrometheusRuleIsAlertsYML keeps kubernetes/base/prometheusrule.yaml
// the text of alerts.yml (comments included) under a PrometheusRule's
// header; -update writes it.
func TestPrometheusRuleIsAlertsYML(t *testing.T) {
	var b bytes.Buffer
	b.WriteString(`# deploy/prometheus/alerts.yml as a PrometheusRule, its groups unchanged.
# Generated: ` + "`go test ./deploy -run TestPrometheusRule -update`" + ` writes it
# again after alerts.yml changes; the test fails while they differ.
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: pin-consumers
spec:
`)
	for _, line := range strings.SplitAfter(readFile(t, filepath.Join("prometheus", "alerts.yml")), "\n") {
		if strings.TrimSpace(line) != "" {
			b.WriteString("  ")
		}
		b.WriteString(line)
	}
	path := filepath.Join(baseDir, "prometheusrule.yaml")
	if *update {
		if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if readFile(t, path) != b.String() {
		t.Errorf("%s is not prometheus/alerts.yml: run `go test ./deploy -run TestPrometheusRule -update`", path)
	}
}

// selects reports whether sel, not empty, matches the labels set.
func selects(sel *metav1.LabelSelector, set labels.Set) bool {
	s, err := metav1.LabelSelectorAsSelector(sel)
	return err == nil && !s.Empty() && s.Matches(set)
}

func secretRef(env []corev1.EnvVar, name string) string {
	for _, e := range env {
		if e.Name == name && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			return e.ValueFrom.SecretKeyRef.Name
		}
	}
	return ""
}

// configMapValue is the value ref names among cms ("" when it is not there).
func configMapValue(cms []*corev1.ConfigMap, ref *corev1.ConfigMapKeySelector) string {
	for _, cm := range cms {
		if cm.Name == ref.Name {
			return cm.Data[ref.Key]
		}
	}
	return ""
}

func envValue(env []corev1.EnvVar, name string) string {
	for _, e := range env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

// goBytes parses a GOMEMLIMIT value as the Go runtime does: a number of
// bytes with an optional B, KiB, MiB, GiB or TiB suffix.
func goBytes(v string) (int64, bool) {
	units := []struct {
		suffix string
		shift  uint
	}{{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}, {"B", 0}}
	shift := uint(0)
	for _, u := range units {
		if n, ok := strings.CutSuffix(v, u.suffix); ok {
			v, shift = n, u.shift
			break
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return 0, false
	}
	return n << shift, true
}
