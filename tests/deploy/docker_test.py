#!/usr/bin/python3
"""Sanity checks of deploy/docker/*.Dockerfile without a Docker engine.

Run with /usr/bin/python3 (see deploy_util.py).

- The build stage is Debian 12 running scripts/setup.sh --build and scripts/build.sh --no-tests,
  options the scripts and CMake really have.
- Every path copied from the build context exists in the repository; every path copied from
  the build stage is something the build makes (an executable CMake puts in build/bin, or a
  file a RUN writes).
- The runtime stage is debian:12-slim, runs as a numeric non-root user (the uid the manifests
  use), starts the copied binary and exposes the ports the manifests use.
- runtime-packages.sh finds the Debian packages of a binary's libraries.
"""

import os
import re
import shlex
import unittest

from deploy_util import K8S, REPO, load_yaml, run

DOCKER = REPO / "deploy" / "docker"
IMAGES = {"worker": "llm-worker", "router": "llm-router"}


def instructions(path):
    """(INSTRUCTION, arguments) pairs of a Dockerfile, continuations joined, comments dropped."""
    lines, current = [], ""
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip().startswith("#") or not line.strip():
            continue
        current += line.rstrip()
        if current.endswith("\\"):
            current = current[:-1] + " "
            continue
        lines.append(current.strip())
        current = ""
    return [(l.split(None, 1)[0].upper(), l.split(None, 1)[1]) for l in lines]


def stages(path):
    """Instructions grouped by stage: [(FROM arguments, [(instruction, arguments)])]."""
    result = []
    for op, args in instructions(path):
        if op == "FROM":
            result.append((args, []))
        elif result:
            result[-1][1].append((op, args))
    return result


def executables():
    """Names of the add_executable targets of the project's CMake files."""
    sources = [d for d in REPO.iterdir() if d.is_dir() and not d.name.startswith(("build", "."))]
    files = [REPO / "CMakeLists.txt"] + [c for d in sources for c in d.rglob("CMakeLists.txt")]
    return {name for f in files
            for name in re.findall(r"add_executable\(\s*([\w-]+)", f.read_text())}


class DockerfileTest(unittest.TestCase):
    def test_scripts_and_options_exist(self):
        setup = REPO / "scripts" / "setup.sh"
        build = REPO / "scripts" / "build.sh"
        for script in (setup, build, DOCKER / "runtime-packages.sh"):
            self.assertTrue(os.access(script, os.X_OK), f"{script} missing or not executable")
        self.assertIn('"--build"', setup.read_text(), "scripts/setup.sh must support --build")
        self.assertIn('"$@"', build.read_text(), "scripts/build.sh must pass its arguments on")
        self.assertIn("--no-tests) tests=OFF", build.read_text(),
                      "scripts/build.sh --no-tests must turn the tests off")
        cmake = (REPO / "CMakeLists.txt").read_text() + (REPO / "cmake" / "Cuda.cmake").read_text()
        for option in ("LLM_BUILD_TESTS", "LLM_ENABLE_CUDA"):
            self.assertIn(f"option({option}", cmake, f"no CMake option {option}")

    def test_dockerfiles(self):
        targets = executables()
        self.assertIn("set(CMAKE_RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)",
                      (REPO / "CMakeLists.txt").read_text(), "executables must land in build/bin")
        for role, binary in IMAGES.items():
            with self.subTest(role):
                self.check_dockerfile(DOCKER / f"{role}.Dockerfile", binary, role, targets)

    def check_dockerfile(self, path, binary, role, targets):
        (build_from, build), (runtime_from, runtime) = stages(path)
        self.assertEqual(build_from, "debian:12 AS build")
        self.assertEqual(runtime_from, "debian:12-slim")
        runs = " ".join(args for op, args in build if op == "RUN")
        self.assertIn("scripts/setup.sh --build", runs)
        self.assertRegex(runs, r"scripts/build\.sh --no-tests")
        self.assertIn(("WORKDIR", "/src"), build)
        for op, args in build + runtime:
            if op != "COPY":
                continue
            words = shlex.split(args)
            source_from = next((w.split("=", 1)[1] for w in words if w.startswith("--from=")),
                               None)
            sources = [w for w in words if not w.startswith("--")][:-1]
            for source in sources:
                if source_from is None:
                    self.assertTrue(source == "." or (REPO / source).exists(),
                                    f"{path.name}: COPY {source}: not in the repository")
                elif source.startswith("/src/build/bin/"):
                    self.assertIn(source.rsplit("/", 1)[1], targets,
                                  f"{path.name}: {source} is no CMake executable")
                else:
                    self.assertIn(f">{source}", runs.replace("> ", ">"),
                                  f"{path.name}: no RUN in the build stage writes {source}")
        # Runtime: the manifests' numeric non-root user, the copied binary, their ports.
        deployment = load_yaml(K8S / "worker" / "deployment.yaml" if role == "worker"
                               else K8S / "common" / "router-deployment.yaml")
        pod = deployment["spec"]["template"]["spec"]
        uid = pod["securityContext"]["runAsUser"]
        self.assertIn(("USER", f"{uid}:{uid}"), runtime, f"{path.name}: USER {uid}:{uid}")
        self.assertIn(("ENTRYPOINT", f'["/usr/local/bin/{binary}"]'), runtime)
        self.assertIn(("COPY", f"--from=build /src/build/bin/{binary} /usr/local/bin/{binary}"),
                      runtime)
        exposed = {int(p) for op, args in runtime if op == "EXPOSE" for p in args.split()}
        ports = {p["containerPort"] for p in pod["containers"][0]["ports"]}
        self.assertEqual(exposed, ports, f"{path.name}: EXPOSE vs the Deployment's ports")

    def test_dockerignore(self):
        for role in IMAGES:
            ignore = (DOCKER / f"{role}.Dockerfile.dockerignore").read_text().split()
            for path in ("build", ".git", ".venv"):
                self.assertIn(path, ignore, f"{role}.Dockerfile.dockerignore must leave out {path}")

    def test_runtime_packages_script(self):
        # Any dynamically linked Debian binary will do: the interpreter running this test.
        packages = run([str(DOCKER / "runtime-packages.sh"), "/usr/bin/python3"]).stdout.split()
        self.assertIn("libc6", packages)


if __name__ == "__main__":
    unittest.main(verbosity=2)
