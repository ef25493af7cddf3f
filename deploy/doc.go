// Package deploy holds what operators load next to the consumers: the
// Prometheus alerting rules (prometheus/alerts.yml, with promtool unit
// tests in prometheus/alerts_test.yml) and the Grafana dashboard
// (grafana/consumers.json), and the Kubernetes manifests (kubernetes/: a
// kustomize base and an example overlay). It has no code; its tests check
// that every metric and label the rules and the dashboard name is exported
// by the three services, run promtool when it is on PATH, and render the
// manifests and check them against the roster, the consumers'
// configuration, the Makefile's image and the rules (kubernetes_test.go).
// The image itself is tested by deploy/image (make image-test).
package deploy
