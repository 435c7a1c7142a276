"""A pytest plugin for the `freethreaded` nox session: the GIL must stay off.

    PYTHONPATH=tools pytest -p gil_guard ...

On a free-threaded CPython, importing an extension that does not declare itself safe without
the GIL turns the GIL back on for the whole process (with a RuntimeWarning that is easy to
miss), and every later test would pass while proving nothing about free threading. So at the
start of the run this plugin imports every extension module of the installed packages and
fails the run if the GIL came back; at its end it checks again, after everything the tests
imported. On an interpreter with a GIL it refuses to run: the session would prove nothing.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import sysconfig

import pytest

# Every compiled module of the project's packages (zrecord's core binding, loaderx's sampler).
EXTENSIONS = ("zrecord._native", "loaderx._sampler")


def _gil_enabled() -> bool:
    probe = getattr(sys, "_is_gil_enabled", None)
    return True if probe is None else bool(probe())


def pytest_configure(config: pytest.Config) -> None:
    if not sysconfig.get_config_var("Py_GIL_DISABLED"):
        raise pytest.UsageError("gil_guard: this interpreter is not a free-threaded build")
    for name in EXTENSIONS:
        if importlib.util.find_spec(name.split(".")[0]) is not None:
            importlib.import_module(name)
    if _gil_enabled():
        raise pytest.UsageError("gil_guard: the GIL is enabled after importing "
                                f"{', '.join(EXTENSIONS)}: a module turned it back on")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _gil_enabled():
        print("\ngil_guard: the GIL was enabled during the run: a module imported by the tests "
              "turned it back on", file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
