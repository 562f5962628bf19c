"""Helpers shared by the deployment tests (tests/deploy/*_test.py).

Most tests run under /usr/bin/python3, not the first python3 on PATH (a pyenv or virtual
environment one): they import Debian's python3-yaml, which only the system interpreter sees.
k8s_test.py and helm_render_test.py run under .venv/bin/python, whose PyYAML and kubernetes
client are pinned in scripts/requirements.txt. A missing tool or module is a failure naming its
package, never a skip.
"""

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "deploy" / "k8s"
PROMETHEUS = REPO / "deploy" / "prometheus"
HELM = REPO / "helm"

try:
    import yaml
except ImportError:
    sys.exit(
        f"{__file__}: cannot import yaml: install the Debian package python3-yaml and run "
        "the tests with /usr/bin/python3"
    )


def require_tool(name, package):
    """Path of the executable `name`; fails naming the Debian package when it is missing."""
    path = shutil.which(name)
    if path is None:
        raise AssertionError(
            f"`{name}` is not installed: install the Debian package {package} "
            "(scripts/setup.sh does)"
        )
    return path


def run(args, **kwargs):
    """Runs a command; fails with its output when it exits non-zero."""
    proc = subprocess.run(args, capture_output=True, text=True, **kwargs)
    if proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(map(str, args))} exited {proc.returncode}\n"
            f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
        )
    return proc


def kustomize(directory):
    """The objects `kubectl kustomize DIR` (or `kustomize build DIR`) renders, as dicts."""
    kubectl = shutil.which("kubectl")
    if kubectl is not None:
        args = [kubectl, "kustomize", str(directory)]
    elif shutil.which("kustomize") is not None:
        args = [shutil.which("kustomize"), "build", str(directory)]
    else:
        raise AssertionError(
            "neither `kubectl` nor `kustomize` is installed: install kubectl, or the Debian "
            "package kubernetes-client (scripts/setup.sh does when no kubectl is present)"
        )
    # kustomize v5 warns on stderr about the deprecated fields the overlays keep for old
    # kubectl versions (see overlays/*/kustomization.yaml); only the exit status matters.
    out = run(args).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def load_yaml(path):
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f)


def flatten_keys(mapping, prefix=""):
    """Dotted paths of the leaves of nested dicts: {"a": {"b": 1}} -> {"a.b"}."""
    keys = set()
    for key, value in mapping.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            keys |= flatten_keys(value, path + ".")
        else:
            keys.add(path)
    return keys
