#!/usr/bin/python3
"""Checks the Helm chart in helm/ without Helm (which Debian does not package).

Run with /usr/bin/python3 (Debian's python3-yaml; see deploy_util.py).

- Every .Values path a template uses exists in values.yaml, and every value is used.
- Every key of values.yaml is documented by a comment (on the line above, or at its end).
- values-cpu-demo.yaml sets only keys that values.yaml has.
- The templates produce the same kinds as the rendered kustomize base.
(The chart's copy of the Prometheus rules is checked by prometheus_test.py.)
"""

import re
import unittest

import deploy_util
from deploy_util import HELM, K8S, kustomize, load_yaml

VALUES_REF = re.compile(r"\$?\.Values((?:\.[A-Za-z_][A-Za-z0-9_]*)+)")
KIND_LINE = re.compile(r"^kind:\s*(\w+)\s*$", re.MULTILINE)


def templates():
    return {p.name: p.read_text(encoding="utf-8") for p in sorted((HELM / "templates").iterdir())}


def value_paths(mapping, prefix=""):
    """Every path of nested dicts, maps included: {"a": {"b": 1}} -> {"a", "a.b"}."""
    paths = set()
    for key, value in mapping.items():
        path = f"{prefix}{key}"
        paths.add(path)
        if isinstance(value, dict):
            paths |= value_paths(value, path + ".")
    return paths


def leaf_paths(mapping, prefix=""):
    return deploy_util.flatten_keys(mapping, prefix)


def undocumented_keys(path):
    """Mapping keys of a YAML file (outside lists) with no comment above or beside them."""
    lines = path.read_text(encoding="utf-8").splitlines()
    missing = []

    def walk(node, prefix):
        for key_node, value_node in node.value:
            line = key_node.start_mark.line
            above = lines[line - 1].strip() if line > 0 else ""
            if not above.startswith("#") and "#" not in lines[line]:
                missing.append(f"{prefix}{key_node.value} (line {line + 1})")
            if isinstance(value_node, deploy_util.yaml.MappingNode):
                walk(value_node, f"{prefix}{key_node.value}.")

    walk(deploy_util.yaml.compose(path.read_text(encoding="utf-8")), "")
    return missing


class HelmChartTest(unittest.TestCase):
    def setUp(self):
        self.values = load_yaml(HELM / "values.yaml")
        self.used = {m.group(1)[1:] for text in templates().values()
                     for m in VALUES_REF.finditer(text)}

    def test_chart_metadata(self):
        chart = load_yaml(HELM / "Chart.yaml")
        self.assertEqual(chart["apiVersion"], "v2")
        for key in ("name", "version", "appVersion", "description"):
            self.assertTrue(chart.get(key), f"Chart.yaml needs {key}")

    def test_every_value_used_in_templates_exists(self):
        missing = self.used - value_paths(self.values)
        self.assertEqual(missing, set(), "templates use .Values paths missing from values.yaml")

    def test_every_value_is_used(self):
        # A value counts as used when a template reads it or a map that holds it.
        unused = {leaf for leaf in leaf_paths(self.values)
                  if not any(leaf == u or leaf.startswith(u + ".") for u in self.used)}
        self.assertEqual(unused, set(), "values.yaml keys no template reads")

    def test_every_value_is_documented(self):
        self.assertEqual(undocumented_keys(HELM / "values.yaml"), [],
                         "values.yaml keys without a comment")

    def test_cpu_demo_values_exist(self):
        demo = leaf_paths(load_yaml(HELM / "values-cpu-demo.yaml"))
        known = value_paths(self.values)
        # worker.config and router.config take any key of the processes' configuration.
        free_form = ("worker.config.", "router.config.")
        self.assertEqual({p for p in demo - known if not p.startswith(free_form)}, set())

    def test_kinds_match_kustomize_base(self):
        chart_kinds = {k for text in templates().values() for k in KIND_LINE.findall(text)}
        # Kinds that only describe other objects (scaleTargetRef) sit indented, not at column 0.
        base_kinds = {o["kind"] for o in kustomize(K8S / "base")}
        self.assertEqual(chart_kinds, base_kinds)


if __name__ == "__main__":
    unittest.main(verbosity=2)
