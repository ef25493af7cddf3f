// Package deploy holds what operators load next to the consumers: the
// Prometheus alerting rules (prometheus/alerts.yml, with promtool unit
// tests in prometheus/alerts_test.yml) and the Grafana dashboard
// (grafana/consumers.json). It has no code; its tests check that every
// metric and label the rules and the dashboard name is exported by the
// three services, and run promtool when it is on PATH.
package deploy
