#!/usr/bin/env python3
"""Renders deploy/k8s (base, overlays, cert-manager) and checks every object.

Run with the test environment's Python, .venv/bin/python: it holds the Kubernetes Python client
pinned in scripts/requirements.txt (kubernetes 30.1.0, whose models are Kubernetes 1.30's API).

1. Schema: each object of a built-in kind is walked against the typed models of the Kubernetes
   Python client (openapi_types / attribute_map): an unknown field anywhere (a typo, a wrong
   nesting) or a value of the wrong type fails, and the client deserializes it with its own
   validation. Custom resources (Prometheus Operator, cert-manager) have no typed model and are
   checked against small allow-lists of their fields.
2. Wiring: selectors match pods, Service ports name container ports, probes use the health
   port, the configuration file passed by --config exists and holds only known keys, the files
   it names are mounted, the grace period covers preStop + drain, the security context holds.
3. Overlay shape: GPU and TLS in gpu, CPU and plaintext in cpu-demo.
"""

import sys
import unittest

import deploy_util
from deploy_util import K8S, REPO, flatten_keys, kustomize, load_yaml

try:
    import kubernetes
    import kubernetes.client as k8s_models
    from kubernetes.client import ApiClient
except ImportError:
    sys.exit(
        f"{__file__}: cannot import kubernetes: run it with .venv/bin/python (scripts/setup.sh "
        "installs scripts/requirements.txt there)"
    )

# The Kubernetes version whose API the manifests are checked against: the client's major version
# is the Kubernetes minor version it models.
KUBERNETES_VERSION = "1.30"
if kubernetes.__version__.split(".")[0] != KUBERNETES_VERSION.split(".")[1]:
    sys.exit(f"{__file__}: kubernetes {kubernetes.__version__} models another Kubernetes than "
             f"{KUBERNETES_VERSION}: install scripts/requirements.txt into .venv")

# The Helm chart can also mount checkpoints from an image volume (Volume.image, Kubernetes
# 1.31+), newer than the models: exactly that field is allowed and checked by hand.
EXTRA_FIELDS = {"V1Volume": {"image"}}
IMAGE_VOLUME_FIELDS = {"reference": str, "pullPolicy": str}

# Custom resources: their apiVersion, and the allowed fields of spec and its nested parts.
CRD_API_VERSIONS = {
    "ServiceMonitor": "monitoring.coreos.com/v1", "PrometheusRule": "monitoring.coreos.com/v1",
    "Issuer": "cert-manager.io/v1", "Certificate": "cert-manager.io/v1",
}
CRD_FIELDS = {
    "ServiceMonitor": {
        "spec": {"jobLabel", "selector", "endpoints", "namespaceSelector", "targetLabels"},
        "endpoint": {"port", "interval", "path", "scheme", "scrapeTimeout", "relabelings"},
    },
    "PrometheusRule": {
        "spec": {"groups"},
        "group": {"name", "interval", "rules"},
        "rule": {"record", "alert", "expr", "for", "labels", "annotations"},
    },
    "Issuer": {"spec": {"selfSigned", "ca"}},
    "Certificate": {
        "spec": {
            "secretName", "commonName", "isCA", "duration", "renewBefore", "privateKey",
            "usages", "dnsNames", "issuerRef",
        },
    },
}

FILE_KEYS = {
    "tls.cert_file", "tls.key_file", "tls.client_ca_file", "upstream_tls.ca_file",
    "upstream_tls.cert_file", "upstream_tls.key_file", "auth.token_file",
}
HEALTH_PORT = 50052
PRIMITIVES = {"str": (str,), "int": (int,), "bool": (bool,), "float": (int, float)}


# ---------------------------------------------------------------------------------------------
# Schema


def model_problems(value, type_name, where):
    """Fields of `value` unknown to the client model `type_name`, and values of a wrong type."""
    if type_name == "object":  # IntOrString and free-form fields
        return []
    if type_name.startswith("list["):
        if not isinstance(value, list):
            return [f"{where}: expected a list"]
        inner = type_name[5:-1]
        return [p for i, v in enumerate(value) for p in model_problems(v, inner, f"{where}[{i}]")]
    if type_name.startswith("dict("):
        if not isinstance(value, dict):
            return [f"{where}: expected a mapping"]
        inner = type_name[5:-1].split(", ", 1)[1]
        return [p for k, v in value.items() for p in model_problems(v, inner, f"{where}.{k}")]
    if type_name in PRIMITIVES:
        ok = isinstance(value, PRIMITIVES[type_name]) and (
            type_name == "bool" or not isinstance(value, bool))
        return [] if ok else [f"{where}: {value!r} is not a {type_name}"]
    model = getattr(k8s_models, type_name)
    if not isinstance(value, dict):
        return [f"{where}: expected a {type_name} mapping"]
    json_to_attr = {json: attr for attr, json in model.attribute_map.items()}
    problems = []
    for key, sub in value.items():
        here = f"{where}.{key}"
        if key in EXTRA_FIELDS.get(type_name, ()):
            problems += image_volume_problems(sub, here)
        elif key not in json_to_attr:
            problems.append(f"{here}: unknown field of {type_name}")
        else:
            problems += model_problems(sub, model.openapi_types[json_to_attr[key]], here)
    return problems


def image_volume_problems(value, where):
    if not isinstance(value, dict) or not isinstance(value.get("reference"), str):
        return [f"{where}: an image volume needs a reference"]
    return [f"{where}.{k}: unknown field of an image volume" for k in value
            if k not in IMAGE_VOLUME_FIELDS]


def model_name(obj):
    api_version, kind = obj["apiVersion"], obj["kind"]
    version = api_version.split("/")[-1]
    name = version[0].upper() + version[1:] + kind
    return name if hasattr(k8s_models, name) else None


def crd_problems(obj, where):
    fields = CRD_FIELDS.get(obj["kind"])
    if fields is None:
        return [f"{where}: no typed model and no custom-resource check for this kind"]
    problems = []
    if obj["apiVersion"] != CRD_API_VERSIONS[obj["kind"]]:
        problems.append(f"{where}: apiVersion {obj['apiVersion']}, expected "
                        f"{CRD_API_VERSIONS[obj['kind']]}")
    problems += [f"{where}.{k}: unknown field"
                 for k in obj if k not in ("apiVersion", "kind", "metadata", "spec")]
    problems += model_problems(obj["metadata"], "V1ObjectMeta", f"{where}.metadata")
    spec = obj.get("spec") or {}
    problems += [f"{where}.spec.{k}: unknown field" for k in spec if k not in fields["spec"]]
    for i, endpoint in enumerate(spec.get("endpoints", [])):
        problems += [f"{where}.spec.endpoints[{i}].{k}: unknown field"
                     for k in endpoint if k not in fields["endpoint"]]
    for g, group in enumerate(spec.get("groups", [])):
        problems += [f"{where}.spec.groups[{g}].{k}: unknown field"
                     for k in group if k not in fields["group"]]
        for r, rule in enumerate(group.get("rules", [])):
            here = f"{where}.spec.groups[{g}].rules[{r}]"
            problems += [f"{here}.{k}: unknown field" for k in rule if k not in fields["rule"]]
            if ("record" in rule) == ("alert" in rule) or "expr" not in rule:
                problems.append(f"{here}: needs expr and one of record or alert")
    return problems


def schema_problems(objects):
    problems = []
    for obj in objects:
        where = f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"
        name = model_name(obj)
        if name is None:
            problems += crd_problems(obj, where)
            continue
        problems += model_problems(obj, name, where)
        try:  # the client's own deserialization, with its required-field validation
            ApiClient()._ApiClient__deserialize(obj, name)
        except (ValueError, TypeError) as e:
            problems.append(f"{where}: the client cannot deserialize it: {e}")
    return problems


# ---------------------------------------------------------------------------------------------
# Wiring


def by_kind(objects, kind):
    return [o for o in objects if o["kind"] == kind]


def one(objects, kind, name_part):
    found = [o for o in by_kind(objects, kind) if name_part in o["metadata"]["name"]]
    assert len(found) == 1, f"expected one {kind} named *{name_part}*, found {len(found)}"
    return found[0]


def selects(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def pod_config(objects, deployment):
    """(file name, parsed YAML, mounted paths) of the configuration a Deployment runs with."""
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    args = container["args"]
    assert args[:1] == ["--config"] and args[1].startswith("/etc/llm/"), \
        f"{deployment['metadata']['name']}: args must be --config /etc/llm/FILE, got {args}"
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == "/etc/llm")
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    files, config_map = set(), None
    for source in volume["projected"]["sources"]:
        kind = "configMap" if "configMap" in source else "secret"
        ref = source[kind]
        if kind == "configMap":
            config_map = next(c for c in by_kind(objects, "ConfigMap")
                              if c["metadata"]["name"] == ref["name"])
            files |= {f"/etc/llm/{key}" for key in config_map["data"]}
        else:
            files |= {f"/etc/llm/{item['path']}" for item in ref["items"]}
    assert config_map is not None, f"{deployment['metadata']['name']}: no ConfigMap in /etc/llm"
    name = args[1][len("/etc/llm/"):]
    assert name in config_map["data"], f"--config {args[1]}: not in ConfigMap " \
        f"{config_map['metadata']['name']} (keys {sorted(config_map['data'])})"
    return name, deploy_util.yaml.safe_load(config_map["data"][name]), files


def check_wiring(test, objects, namespace):
    deployments = by_kind(objects, "Deployment")
    pods = {d["metadata"]["name"]: d["spec"]["template"] for d in deployments}
    for d in deployments:
        name, tmpl = d["metadata"]["name"], d["spec"]["template"]
        test.assertTrue(selects(d["spec"]["selector"]["matchLabels"], tmpl["metadata"]["labels"]),
                        f"{name}: selector does not match its pod labels")
        check_pod(test, objects, d)
    for svc in by_kind(objects, "Service"):
        targets = [p for p in pods.values()
                   if selects(svc["spec"]["selector"], p["metadata"]["labels"])]
        # The workers' headless Service selects the workers of every model (one Deployment
        # each); any other Service selects one Deployment's pods.
        test.assertTrue(targets, f"Service {svc['metadata']['name']} selects no pod")
        if "worker" not in svc["metadata"]["name"]:
            test.assertEqual(len(targets), 1, f"Service {svc['metadata']['name']} must select "
                             "one Deployment's pods")
        for target in targets:
            port_names = {p["name"] for p in target["spec"]["containers"][0]["ports"]}
            for port in svc["spec"]["ports"]:
                test.assertIn(port["targetPort"], port_names,
                              f"Service {svc['metadata']['name']}: no container port "
                              f"{port['targetPort']}")
    for kind in ("PodDisruptionBudget", "NetworkPolicy"):
        for obj in by_kind(objects, kind):
            sel = (obj["spec"].get("selector") or obj["spec"].get("podSelector"))["matchLabels"]
            test.assertTrue(any(selects(sel, p["metadata"]["labels"]) for p in pods.values()),
                            f"{kind} {obj['metadata']['name']} selects no pod")
    for hpa in by_kind(objects, "HorizontalPodAutoscaler"):
        test.assertIn(hpa["spec"]["scaleTargetRef"]["name"], pods,
                      f"HPA {hpa['metadata']['name']}: no such Deployment")
    for sm in by_kind(objects, "ServiceMonitor"):
        services = [s for s in by_kind(objects, "Service")
                    if selects(sm["spec"]["selector"]["matchLabels"], s["metadata"]["labels"])]
        test.assertEqual(len(services), 1, f"ServiceMonitor {sm['metadata']['name']} must "
                         "select one Service")
        test.assertIn(sm["spec"]["jobLabel"], services[0]["metadata"]["labels"])
        for endpoint in sm["spec"]["endpoints"]:
            test.assertIn(endpoint["port"], {p["name"] for p in services[0]["spec"]["ports"]})
    # The routers discover the workers through the headless Service.
    headless = one(objects, "Service", "worker-headless")
    test.assertEqual(headless["spec"]["clusterIP"], "None")
    test.assertFalse(headless["spec"]["publishNotReadyAddresses"])
    _, router_config, _ = pod_config(objects, one(objects, "Deployment", "router"))
    host, port = router_config["discovery"]["dns"].rsplit(":", 1)
    short = headless["metadata"]["name"]
    allowed = {short} if namespace is None else {f"{short}.{namespace}.svc.cluster.local"}
    test.assertIn(host, allowed, "discovery.dns must name the headless Service")
    test.assertEqual(int(port), next(p["port"] for p in headless["spec"]["ports"]
                                     if p["name"] == "grpc"))


def check_pod(test, objects, deployment):
    name = deployment["metadata"]["name"]
    role = "worker" if "worker" in name else "router"
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    # Security.
    test.assertTrue(pod["securityContext"]["runAsNonRoot"], f"{name}: runAsNonRoot")
    test.assertNotEqual(pod["securityContext"].get("runAsUser", 0), 0, f"{name}: runAsUser")
    sc = container["securityContext"]
    test.assertTrue(sc["readOnlyRootFilesystem"], f"{name}: readOnlyRootFilesystem")
    test.assertFalse(sc["allowPrivilegeEscalation"], f"{name}: allowPrivilegeEscalation")
    test.assertEqual(sc["capabilities"]["drop"], ["ALL"], f"{name}: drop ALL capabilities")
    test.assertFalse(pod["automountServiceAccountToken"])
    # Probes: native gRPC on the plaintext health port.
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    test.assertEqual(ports["health"], HEALTH_PORT)
    expected = {"startupProbe": "", "readinessProbe": "",
                "livenessProbe": "liveness" if role == "worker" else ""}
    for probe, service in expected.items():
        test.assertEqual(container[probe]["grpc"], {"port": HEALTH_PORT, "service": service},
                         f"{name}: {probe}")
    # Configuration: known keys, listen ports as declared, files mounted.
    file_name, config, mounted = pod_config(objects, deployment)
    # deploy/config/*.yaml is --print-config's output: every key the process accepts.
    known = flatten_keys(load_yaml(REPO / "deploy" / "config" / file_name))
    keys = flatten_keys(config)
    test.assertEqual(keys - known, set(), f"{name}: unknown keys in {file_name}")
    section = "server" if role == "worker" else "router"
    for key, port_name in (("listen", "grpc"), ("metrics_listen", "metrics"),
                           ("health_listen", "health")):
        test.assertEqual(int(config[section][key].rsplit(":", 1)[1]), ports[port_name],
                         f"{name}: {section}.{key} vs container port {port_name}")
    for key in keys & FILE_KEYS:
        section_name, leaf = key.split(".")
        test.assertIn(config[section_name][leaf], mounted, f"{name}: {key} is not mounted")
    # Termination: preStop sleep, then a drain that must end before the kubelet's SIGKILL.
    sleep = container["lifecycle"]["preStop"]["exec"]["command"]
    test.assertEqual(sleep[0], "sleep")
    drain = config[section].get("drain_grace_seconds", 30)
    test.assertGreater(pod["terminationGracePeriodSeconds"], int(sleep[1]) + drain,
                       f"{name}: terminationGracePeriodSeconds <= preStop + drain grace")
    test.assertEqual(deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"], 0)
    if role == "router":
        test.assertIn("cpu", container["resources"]["requests"],
                      "the router HPA on CPU utilization needs a CPU request")


# ---------------------------------------------------------------------------------------------
# Tests


class KustomizeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.rendered = {name: kustomize(K8S / path) for name, path in (
            ("base", "base"), ("cpu-demo", "overlays/cpu-demo"), ("gpu", "overlays/gpu"),
            ("two-models", "overlays/two-models"), ("cert-manager", "cert-manager"),
            ("common", "common"), ("worker", "worker"))}

    def test_schema(self):
        for name, objects in self.rendered.items():
            with self.subTest(name):
                self.assertTrue(objects, f"{name} renders nothing")
                self.assertEqual(schema_problems(objects), [])

    def test_schema_check_is_strict(self):
        pod = {"containers": [{"name": "c", "readinessProbe": {"grpc": {"port": "x", "servise": ""}}}]}
        deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
                      "spec": {"selector": {}, "template": {"spec": pod}}}
        hpa = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
               "metadata": {"name": "h"}, "spec": {"maxReplicas": 2, "behaviour": {},
                                                   "scaleTargetRef": {"kind": "D", "name": "d"}}}
        found = "\n".join(schema_problems([deployment, hpa]))
        for wanted in ("grpc.port: 'x' is not a int", "grpc.servise: unknown field of V1GRPCAction",
                       "spec.behaviour: unknown field of V2HorizontalPodAutoscalerSpec"):
            self.assertIn(wanted, found)

    def test_wiring(self):
        for name, namespace in (("base", None), ("cpu-demo", "llm-demo"), ("gpu", "llm"),
                                ("two-models", "llm-two-models")):
            with self.subTest(name):
                check_wiring(self, self.rendered[name], namespace)

    def test_base_kinds(self):
        kinds = {o["kind"] for o in self.rendered["base"]}
        self.assertEqual(kinds, {
            "ConfigMap", "Deployment", "Service", "PodDisruptionBudget",
            "HorizontalPodAutoscaler", "NetworkPolicy", "ServiceMonitor", "PrometheusRule"})

    def test_base_is_common_plus_one_worker(self):
        def ids(name):
            return sorted((o["kind"], o["metadata"]["name"]) for o in self.rendered[name])
        self.assertEqual(ids("base"), sorted(ids("common") + ids("worker")))
        # Nothing of one model's workers is in common (its Services select every model's).
        per_model = ("Deployment", "HorizontalPodAutoscaler", "PodDisruptionBudget", "ConfigMap")
        self.assertEqual([o["metadata"]["name"] for o in self.rendered["common"]
                          if o["kind"] in per_model and "worker" in o["metadata"]["name"]], [])

    def test_two_models_get_a_worker_deployment_each(self):
        objects = self.rendered["two-models"]
        workers = [d for d in by_kind(objects, "Deployment") if "worker" in d["metadata"]["name"]]
        self.assertEqual(sorted(d["metadata"]["name"] for d in workers),
                         ["llm-worker-small", "llm-worker-tiny"])
        headless = one(objects, "Service", "worker-headless")
        for d in workers:
            name, tmpl = d["metadata"]["name"], d["spec"]["template"]
            model = tmpl["metadata"]["labels"]["llm-serving/model"]
            self.assertEqual(name, f"llm-worker-{model}")
            _, config, _ = pod_config(objects, d)
            self.assertEqual(config["model"]["name"], model, f"{name}: model.name")
            # Its own HPA and PodDisruptionBudget count only its pods...
            hpa = one(objects, "HorizontalPodAutoscaler", name)
            self.assertEqual(hpa["spec"]["scaleTargetRef"]["name"], name)
            self.assertEqual(hpa["spec"]["metrics"][0]["pods"]["metric"]["name"],
                             "llm_num_requests_waiting")
            pdb = one(objects, "PodDisruptionBudget", name)
            owners = [w["metadata"]["name"] for w in workers
                      if selects(pdb["spec"]["selector"]["matchLabels"],
                                 w["spec"]["template"]["metadata"]["labels"])]
            self.assertEqual(owners, [name], f"PodDisruptionBudget {name} selects {owners}")
            others = [w for w in workers if w is not d]
            for other in others:
                self.assertFalse(selects(d["spec"]["selector"]["matchLabels"],
                                         other["spec"]["template"]["metadata"]["labels"]),
                                 f"{name}'s selector also selects {other['metadata']['name']}")
            # ...while the routers reach it through the one headless Service.
            self.assertTrue(selects(headless["spec"]["selector"], tmpl["metadata"]["labels"]))
        self.assertEqual(len({one(objects, "HorizontalPodAutoscaler", d["metadata"]["name"])
                              ["spec"]["maxReplicas"] for d in workers}), 2,
                         "each model has its own replica range")
        self.assertEqual(len(by_kind(objects, "Service")), 2)

    def test_worker_autoscaling_on_queue_depth(self):
        hpa = one(self.rendered["gpu"], "HorizontalPodAutoscaler", "worker")
        metric = hpa["spec"]["metrics"][0]
        self.assertEqual(metric["type"], "Pods")
        self.assertEqual(metric["pods"]["metric"]["name"], "llm_num_requests_waiting")
        self.assertEqual(metric["pods"]["target"]["type"], "AverageValue")

    def test_gpu_overlay(self):
        objects = self.rendered["gpu"]
        worker = one(objects, "Deployment", "worker")
        pod = worker["spec"]["template"]["spec"]
        self.assertEqual(pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"], "1")
        startup = pod["containers"][0]["startupProbe"]
        self.assertGreaterEqual(startup["periodSeconds"] * startup["failureThreshold"], 600,
                                "GPU model load needs 10 minutes of startup probe")
        _, config, _ = pod_config(objects, worker)
        self.assertEqual(config["engine"]["backend"], "cuda")
        self.assertEqual(set(config["tls"]), {"cert_file", "key_file", "client_ca_file"})
        _, router, _ = pod_config(objects, one(objects, "Deployment", "router"))
        self.assertEqual(set(router["upstream_tls"]),
                         {"ca_file", "cert_file", "key_file", "server_name"})
        self.assertIn("token_file", router["auth"])
        certificate = one(self.rendered["cert-manager"], "Certificate", "llm-tls")
        self.assertIn(router["upstream_tls"]["server_name"], certificate["spec"]["dnsNames"],
                      "the workers' certificate must hold upstream_tls.server_name")
        for d in by_kind(objects, "Deployment"):
            for source in d["spec"]["template"]["spec"]["volumes"][0]["projected"]["sources"]:
                if "secret" in source:
                    self.assertFalse(source["secret"].get("optional", False),
                                     f"{d['metadata']['name']}: TLS Secrets are required here")

    def test_cpu_demo_overlay(self):
        objects = self.rendered["cpu-demo"]
        worker = one(objects, "Deployment", "worker")
        self.assertNotIn("nvidia.com/gpu", str(worker))
        _, config, _ = pod_config(objects, worker)
        self.assertEqual(config["engine"]["backend"], "cpu")
        self.assertEqual(config["model"]["path"], "random:tiny")
        self.assertNotIn("tls", config)
        _, router, _ = pod_config(objects, one(objects, "Deployment", "router"))
        self.assertFalse({"tls", "upstream_tls", "auth"} & set(router))


if __name__ == "__main__":
    # --objects FILE...: only the schema check, of the objects in those YAML files (the Helm
    # chart as Helm renders it: helm_render_test.py); prints each problem, exits 1 on any.
    if sys.argv[1:2] == ["--objects"]:
        import yaml
        objects = [o for f in sys.argv[2:] for o in yaml.safe_load_all(open(f, encoding="utf-8"))
                   if o]
        found = schema_problems(objects) + ([] if objects else ["no objects"])
        print("\n".join(found))
        sys.exit(1 if found else 0)
    unittest.main(verbosity=2)
