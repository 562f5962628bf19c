#!/usr/bin/python3
"""yamllint is clean on deploy/ and helm/ (config: tests/deploy/yamllint.yaml, which leaves out
the Go templates in helm/templates and the generated deploy/config/*.yaml).

Run with /usr/bin/python3 (see deploy_util.py). Needs yamllint (Debian package yamllint).
"""

import unittest

from deploy_util import REPO, require_tool, run

CONFIG = REPO / "tests" / "deploy" / "yamllint.yaml"


class YamllintTest(unittest.TestCase):
    def test_lints_the_files_it_should(self):
        yamllint = require_tool("yamllint", "yamllint")
        listed = set(run([yamllint, "-c", str(CONFIG), "--list-files", "deploy", "helm"],
                         cwd=REPO).stdout.split())
        for path in ("helm/values.yaml", "helm/Chart.yaml", "deploy/k8s/base/kustomization.yaml",
                     "deploy/prometheus/rules.yaml"):
            self.assertIn(path, listed)
        self.assertFalse([p for p in listed if p.startswith("helm/templates/")],
                         "helm/templates must be left out: Go templates are not YAML")

    def test_clean(self):
        yamllint = require_tool("yamllint", "yamllint")
        # --strict: warnings fail too. Paths in the config are relative to the repository root.
        run([yamllint, "-c", str(CONFIG), "--strict", "-f", "parsable", "deploy", "helm"],
            cwd=REPO)


if __name__ == "__main__":
    unittest.main(verbosity=2)
