"""The kit's modules import with the standard library alone, and never import the packages
whose tests use them (docs/architecture.md): so any environment can load the pytest plugin and
the benchmarks can run the proxy and the HTTP server without moto, zrecord or loaderx."""

from __future__ import annotations

import subprocess
import sys

import pytest

# What importing each module loads besides the standard library, in a fresh interpreter: the
# kit itself, and for the plugin pytest and what pytest brings.
PROGRAM = """
import importlib, sys
before = set(sys.modules)
importlib.import_module(sys.argv[1])
loaded = {name.partition(".")[0] for name in set(sys.modules) - before}
print(" ".join(sorted(loaded - set(sys.stdlib_module_names) - {"zrecord_testkit"})))
"""


@pytest.mark.parametrize("module", ["zrecord_testkit", "zrecord_testkit.servers",
                                    "zrecord_testkit.netlink"])
def test_modules_need_only_the_standard_library(module: str) -> None:
    done = subprocess.run([sys.executable, "-c", PROGRAM, module], capture_output=True, text=True,
                          check=True, timeout=60)
    assert done.stdout.split() == [], f"importing {module} loads {done.stdout.strip()}"


def test_the_plugin_imports_no_server_and_no_package_under_test() -> None:
    done = subprocess.run([sys.executable, "-c", PROGRAM, "zrecord_testkit.pytest_plugin"],
                          capture_output=True, text=True, check=True, timeout=60)
    loaded = set(done.stdout.split())
    assert "pytest" in loaded
    assert not loaded & {"zrecord", "loaderx", "loaderx_converter", "moto", "boto3", "botocore"}
    probe = subprocess.run([sys.executable, "-c", "import sys, zrecord_testkit.pytest_plugin; "
                            "print('zrecord_testkit.servers' in sys.modules)"],
                           capture_output=True, text=True, check=True, timeout=60)
    assert probe.stdout.strip() == "False", "the plugin loads the servers before a test asks"
