"""Renders the Helm chart in helm/ with Helm's own code and checks what comes out.

Run with the virtual environment's Python (.venv/bin/python holds the pinned helm-python-sdk,
Helm v4's Go SDK as a C library: no helm binary, no cluster, no network). helm_test.py checks
the chart's sources; this one its output.

- values.schema.json accepts values.yaml, values-cpu-demo.yaml and values-two-models.yaml, and
  refuses bad values naming the key.
- Each values file renders, and every object passes the strict schema check of the kustomize
  output (k8s_test.py --objects: Kubernetes 1.30's API, from the pinned kubernetes client).
- The defaults keep the single worker Deployment's names (<prefix>-worker).
- values-two-models.yaml gives one worker Deployment, ConfigMap, HPA and PodDisruptionBudget
  per model, with selectors that do not overlap, each pod's configuration naming its model,
  the model's volume, node selector and GPUs, and topology spread over its own pods; one
  headless Service and one router find them all.
- An image volume renders for a model whose checkpoints come from an OCI image.
"""
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

import yaml

try:
    import helm_python as helm
except ImportError:
    sys.exit(f"{__file__}: cannot import helm_python: run with .venv/bin/python "
             "(scripts/setup.sh installs helm-python-sdk from scripts/requirements.txt)")

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm"


def values(name):
    return yaml.safe_load((CHART / name).read_text(encoding="utf-8")) if name else None


def render(chart, vals):
    """The objects the chart makes with `vals`, as Helm renders them (release llm in llm)."""
    out = chart.render(vals, name="llm", namespace="llm")
    return [doc for path, text in sorted(out.items()) if path.endswith(".yaml")
            for doc in yaml.safe_load_all(text) if doc]


def named(objects, kind):
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def selects(selector, labels):
    return all(labels.get(k) == v for k, v in selector.items())


class HelmRenderTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.chart = helm.Chart.load(str(CHART))

    def test_schema_accepts_the_values_files_and_refuses_bad_values(self):
        for name in ("values.yaml", "values-cpu-demo.yaml", "values-two-models.yaml"):
            with self.subTest(name):
                self.chart.validate_schema(values(name))
        for bad, key in (({"models": [{"name": "Big_Model", "path": "/m"}]}, "/models/0/name"),
                         ({"models": [{"name": "a"}]}, "path"),
                         ({"worker": {"gpus": 0}}, "/worker/gpus"),
                         ({"worker": {"replica": 3}}, "replica"),
                         ({"worker": {"topologySpread": {"whenUnsatisfiable": "Maybe"}}},
                          "whenUnsatisfiable")):
            with self.subTest(str(bad)):
                with self.assertRaises(helm.HelmError) as e:
                    self.chart.validate_schema(bad)
                self.assertIn(key, str(e.exception))

    def test_every_rendered_object_passes_the_strict_schema_check(self):
        with tempfile.TemporaryDirectory() as tmp:
            files = []
            for name in (None, "values-cpu-demo.yaml", "values-two-models.yaml"):
                path = os.path.join(tmp, f"{name or 'defaults'}.rendered.yaml")
                with open(path, "w", encoding="utf-8") as f:
                    yaml.safe_dump_all(render(self.chart, values(name)), f)
                files.append(path)
            r = subprocess.run([sys.executable, "-B", str(REPO / "tests/deploy/k8s_test.py"),
                                "--objects", *files], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_the_defaults_keep_one_worker_deployment(self):
        objects = render(self.chart, None)
        self.assertEqual(sorted(named(objects, "Deployment")), ["llm-router", "llm-worker"])
        self.assertEqual(sorted(named(objects, "HorizontalPodAutoscaler")),
                         ["llm-router", "llm-worker"])
        config = yaml.safe_load(named(objects, "ConfigMap")["llm-worker-config"]["data"]
                                ["worker.yaml"])
        self.assertEqual(config["model"], {"path": "/models/llama-3-8b-instruct"})

    def test_two_models_get_a_worker_deployment_each(self):
        vals = values("values-two-models.yaml")
        objects = render(self.chart, vals)
        deployments = named(objects, "Deployment")
        hpas = named(objects, "HorizontalPodAutoscaler")
        pdbs = named(objects, "PodDisruptionBudget")
        configs = named(objects, "ConfigMap")
        headless = named(objects, "Service")["llm-worker-headless"]
        workers = []
        for m in vals["models"]:
            name = f"llm-worker-{m['name']}"
            d = deployments[name]
            pod = d["spec"]["template"]
            labels, spec = pod["metadata"]["labels"], pod["spec"]
            selector = d["spec"]["selector"]["matchLabels"]
            self.assertTrue(selects(selector, labels), name)
            self.assertTrue(selects(headless["spec"]["selector"], labels), name)
            self.assertEqual(hpas[name]["spec"]["scaleTargetRef"]["name"], name)
            self.assertEqual(hpas[name]["spec"]["maxReplicas"], m["autoscaling"]["maxReplicas"])
            self.assertEqual(pdbs[name]["spec"]["selector"]["matchLabels"], selector)
            mounted = spec["volumes"][0]["projected"]["sources"][0]["configMap"]["name"]
            config = yaml.safe_load(configs[mounted]["data"]["worker.yaml"])
            self.assertEqual(config["model"]["name"], m["name"])
            self.assertEqual(config["model"]["path"], m["path"])
            self.assertEqual(config["model"].get("served_names", ""),
                             ",".join(m.get("servedNames", [])))
            models_volume = next(v for v in spec["volumes"] if v["name"] == "models")
            if "claimName" in m["volume"]:
                self.assertEqual(models_volume["persistentVolumeClaim"]["claimName"],
                                 m["volume"]["claimName"])
            else:
                self.assertEqual(models_volume["hostPath"]["path"], m["volume"]["hostPath"])
            self.assertEqual(spec.get("nodeSelector", {}), m.get("nodeSelector", {}))
            container = spec["containers"][0]
            self.assertEqual(container["resources"]["limits"]["nvidia.com/gpu"], "1")
            self.assertEqual(container["env"], vals["worker"]["extraEnv"])
            spread = spec["topologySpreadConstraints"]
            self.assertEqual([c["topologyKey"] for c in spread],
                             vals["worker"]["topologySpread"]["topologyKeys"])
            for c in spread:
                self.assertEqual(c["labelSelector"]["matchLabels"], selector)
            workers.append((selector, labels))
        llama = yaml.safe_load(configs["llm-worker-llama-3-8b-instruct-config"]["data"]
                               ["worker.yaml"])
        self.assertEqual(llama["engine"]["max_slots"], 128)
        # No Deployment selects the other's pods.
        (sel_a, labels_a), (sel_b, labels_b) = workers
        self.assertFalse(selects(sel_a, labels_b))
        self.assertFalse(selects(sel_b, labels_a))
        self.assertEqual(len(named(objects, "Service")), 2)  # the router's and the headless one

    def test_checkpoints_from_an_image_volume(self):
        objects = render(self.chart, {"models": [
            {"name": "small", "path": "/models/small", "gpus": 2,
             "volume": {"image": "registry.example/models/small:1"}}]})
        spec = named(objects, "Deployment")["llm-worker-small"]["spec"]["template"]["spec"]
        volume = next(v for v in spec["volumes"] if v["name"] == "models")
        self.assertEqual(volume["image"]["reference"], "registry.example/models/small:1")
        self.assertEqual(spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"], "2")


if __name__ == "__main__":
    unittest.main(verbosity=2)
