#!/usr/bin/python3
"""Checks deploy/prometheus: the rules, their unit tests, their copies and the adapter rules.

Run with /usr/bin/python3 (Debian's python3-yaml; see deploy_util.py). Needs promtool (Debian
package prometheus).

- promtool check rules / promtool test rules pass.
- Every alert fires in some test case and stays silent in another, and has a runbook in
  docs/operations.md.
- Every metric the rules read is one the processes export (README.md, docs/router.md).
- The PrometheusRule copies (kustomize base, Helm chart) hold the same rules.
- The prometheus-adapter rules are valid PromQL once expanded and serve every Pods metric the
  worker HorizontalPodAutoscaler asks for.
"""

import re
import tempfile
import unittest

import deploy_util
from deploy_util import HELM, K8S, PROMETHEUS, REPO, kustomize, load_yaml, require_tool, run

RULES = PROMETHEUS / "rules.yaml"
# A metric name, not part of a recording rule's level:name:operations name.
METRIC = re.compile(r"(?<![\w:])(llm_[a-z0-9_]+)(?![\w:])")
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def promtool():
    return require_tool("promtool", "prometheus")


def alerts():
    return [r["alert"] for g in load_yaml(RULES)["groups"] for r in g["rules"] if "alert" in r]


def promtool_check(rules):
    """Runs `promtool check rules` on a rules document (a dict)."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        deploy_util.yaml.safe_dump(rules, f)
        f.flush()
        run([promtool(), "check", "rules", f.name])


class RulesTest(unittest.TestCase):
    def test_promtool_check_rules(self):
        run([promtool(), "check", "rules", str(RULES)])

    def test_promtool_test_rules(self):
        run([promtool(), "test", "rules", str(PROMETHEUS / "rules_test.yaml")])

    def test_every_alert_fires_and_stays_silent(self):
        cases = [c for t in load_yaml(PROMETHEUS / "rules_test.yaml")["tests"]
                 for c in t.get("alert_rule_test", [])]
        for alert in alerts():
            with self.subTest(alert):
                self.assertTrue(any(c["alertname"] == alert and c.get("exp_alerts")
                                    for c in cases), f"no test case where {alert} fires")
                self.assertTrue(any(c["alertname"] == alert and not c.get("exp_alerts")
                                    for c in cases), f"no test case where {alert} is silent")

    def test_every_alert_has_a_runbook(self):
        operations = (REPO / "docs" / "operations.md").read_text(encoding="utf-8")
        for alert in alerts():
            self.assertIn(f"### {alert}", operations, f"docs/operations.md: no runbook for "
                          f"{alert} (a '### {alert}' heading)")

    def test_rules_read_exported_metrics(self):
        documented = set()
        for doc in ("README.md", "docs/router.md"):
            documented |= set(METRIC.findall((REPO / doc).read_text(encoding="utf-8")))
        for group in load_yaml(RULES)["groups"]:
            for rule in group["rules"]:
                for name in METRIC.findall(rule["expr"]):
                    base = next((name[:-len(s)] for s in HISTOGRAM_SUFFIXES
                                 if name.endswith(s)), name)
                    self.assertIn(base, documented, f"{rule.get('record') or rule['alert']}: "
                                  f"{name} is not a metric README.md or docs/router.md lists")

    def test_copies_match(self):
        rules = load_yaml(RULES)
        base_rule = next(o for o in kustomize(K8S / "base") if o["kind"] == "PrometheusRule")
        hint = "run deploy/prometheus/sync-copies.sh after editing deploy/prometheus/rules.yaml"
        self.assertEqual(base_rule["spec"], rules, f"deploy/k8s/base differs: {hint}")
        self.assertEqual((HELM / "files" / "rules.yaml").read_text(encoding="utf-8"),
                         RULES.read_text(encoding="utf-8"), f"helm/files differs: {hint}")


class AdapterRulesTest(unittest.TestCase):
    def setUp(self):
        self.rules = load_yaml(PROMETHEUS / "adapter-rules.yaml")["rules"]

    def test_queries_are_valid_promql(self):
        # Expand the adapter's templates the way it does for one namespace and two pods.
        expanded = []
        for i, rule in enumerate(self.rules):
            expanded.append({"record": f"adapter:series_query:{i}", "expr": rule["seriesQuery"]})
            query = (rule["metricsQuery"]
                     .replace("<<.Series>>", "llm_num_requests_waiting")
                     .replace("<<.LabelMatchers>>", 'namespace="llm",pod=~"a|b"')
                     .replace("<<.GroupBy>>", "pod"))
            self.assertNotIn("<<", query, "unknown template in metricsQuery")
            expanded.append({"record": f"adapter:metrics_query:{i}", "expr": query})
        promtool_check({"groups": [{"name": "adapter", "rules": expanded}]})

    def test_rules_map_series_to_pods(self):
        for rule in self.rules:
            overrides = rule["resources"]["overrides"]
            self.assertEqual(overrides["namespace"], {"resource": "namespace"})
            self.assertEqual(overrides["pod"], {"resource": "pod"})

    def test_serves_the_hpa_metrics(self):
        served = set()
        for rule in self.rules:
            selector = re.search(r'__name__=~"([^"]+)"', rule["seriesQuery"]).group(1)
            for series in selector.split("|"):
                served.add(re.sub(rule["name"]["matches"],
                                  rule["name"]["as"].replace("${1}", r"\1"), series))
        wanted = {m["pods"]["metric"]["name"] for o in kustomize(K8S / "base")
                  if o["kind"] == "HorizontalPodAutoscaler"
                  for m in o["spec"]["metrics"] if m["type"] == "Pods"}
        self.assertTrue(wanted, "no HPA on a Pods metric in deploy/k8s/base")
        self.assertEqual(wanted - served, set(), "HPA metrics the adapter rules do not serve")


if __name__ == "__main__":
    unittest.main(verbosity=2)
