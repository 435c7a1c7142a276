"""The DataLoader's warning about a transform whose number constants are not immortal on a
free-threaded CPython 3.13 (loaderx/_constants.py): what it looks at on every interpreter, and
on 3.13t with the GIL off (the `freethreaded` nox session) that it warns about a module
compiled from its source and not about the same module loaded from its .pyc."""

from __future__ import annotations

import functools
import importlib.util
import py_compile
import sys
import types
import uuid
import warnings

import numpy as np
import pytest

from loaderx import _constants
from loaderx.dataloader import DataLoader
from loaderx.sampler import Sampler

FREE_THREADED_313 = _constants._applies()

SOURCE = '''
import math


def features(values):
    counts = [0.0] * 8
    for i, v in enumerate(values):
        counts[(i * 1000003 + int(v)) % 8] += 1.5
    return counts


def transform(batch):
    return {"x": [features(row) for row in batch["x"]], "pi": math.pi}


class Scale:
    factor = 2

    def __call__(self, batch):
        return {"x": batch["x"] * 2.5}
'''


def _import(tmp_path, *, from_pyc: bool) -> types.ModuleType:
    """A fresh module of SOURCE, compiled from its source in this process or loaded from the
    .pyc that py_compile writes for it."""
    name = f"transform_{uuid.uuid4().hex[:12]}"
    path = tmp_path / f"{name}.py"
    path.write_text(SOURCE)
    if from_pyc:
        py_compile.compile(str(path), doraise=True)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    writing, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    try:
        spec.loader.exec_module(module)
    finally:
        sys.dont_write_bytecode = writing
    return module


def _loader(transform):
    return DataLoader({"x": np.zeros((16, 3))}, Sampler(16, 4, "cyclic", seed=0), transform,
                      workers=2)


def test_mortal_constants_counts_the_numbers_of_nested_code_and_tuples():
    def outer():
        def inner(a):
            return a + 2.5 + a * 1000003
        return (7.5, (8.5, "text")), inner, [x * 3.5 for x in range(3)]

    seen = []

    def immortal(obj):
        seen.append(obj)
        return obj == 8.5  # stands in for a constant that was made immortal

    # outer: 7.5 and 8.5 in the folded tuple, 3; inner: 2.5 and 1000003; the comprehension:
    # 3.5 (None, strings and code objects are not numbers and are not asked about).
    assert _constants.mortal_constants(outer.__code__, immortal) == 5
    assert sorted(seen, key=float) == [2.5, 3, 3.5, 7.5, 8.5, 1000003]


def test_the_function_that_a_transform_runs_is_found_through_methods_partials_and_objects(tmp_path):
    module = _import(tmp_path, from_pyc=False)
    scale = module.Scale()
    assert _constants._function_of(module.transform) is module.transform
    assert _constants._function_of(functools.partial(module.transform)) is module.transform
    assert _constants._function_of(scale) is module.Scale.__call__
    assert _constants._function_of(scale.__call__) is module.Scale.__call__
    assert _constants._function_of(len) is None  # a builtin runs no Python code


def test_the_modules_reached_are_the_transforms_own_and_those_its_code_names(tmp_path):
    module = _import(tmp_path, from_pyc=False)
    names = [m.__name__ for m in _constants.reached_modules(module.transform)]
    assert names == sorted([module.__name__, "math"])
    # A lambda in another module that names the transform reaches that module too.
    lam = eval("lambda batch: transform(batch)", {"transform": module.transform,
                                                 "__name__": __name__})
    assert module.__name__ in [m.__name__ for m in _constants.reached_modules(lam)]
    # A transform made by a factory reaches what its closure holds.
    def factory(fn):
        return lambda batch: fn(batch)
    assert module.__name__ in [m.__name__ for m in _constants.reached_modules(factory(module.transform))]
    assert module.__name__ in [m.__name__ for m in _constants.reached_modules(factory(module.Scale()))]
    # Made by exec with no __name__ in its globals: its module is None, which reaches nothing.
    nameless = eval("lambda batch: transform(batch)", {"transform": module.transform})
    assert nameless.__module__ is None
    assert [m.__name__ for m in _constants.reached_modules(nameless)] == [module.__name__]


def test_contended_counts_every_function_and_method_of_a_module(tmp_path):
    module = _import(tmp_path, from_pyc=False)
    # Every number constant counted as mortal: features' 0.0, 8, 1000003, 8 and 1.5 (8 twice:
    # a code object keeps each constant once), Scale.__call__'s 2.5; small ints count too here.
    found = _constants.contended(module.transform, immortal=lambda obj: False)
    assert found == {module.__name__: _constants.mortal_constants(module.features.__code__,
                                                                  lambda obj: False) + 1}
    assert found[module.__name__] >= 5


@pytest.mark.skipif(FREE_THREADED_313, reason="the interpreters with a GIL (or 3.14t): the "
                    "free-threaded case is the next test")
def test_no_warning_on_an_interpreter_the_warning_is_not_about(tmp_path):
    module = _import(tmp_path, from_pyc=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _loader(module.transform).close()


@pytest.mark.skipif(not FREE_THREADED_313, reason="about CPython 3.13t with the GIL off (the "
                    "freethreaded nox session runs it)")
def test_on_313t_a_module_compiled_from_source_is_warned_about_once_and_its_pyc_is_not(tmp_path):
    from_source = _import(tmp_path, from_pyc=False)
    with pytest.warns(RuntimeWarning, match=f"'{from_source.__name__}' \\(\\d+\\)") as caught:
        _loader(from_source.transform).close()
    assert caught[0].filename == __file__  # attributed to the DataLoader(...) call
    assert "python -m compileall" in str(caught[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _loader(from_source.transform).close()  # once per module
        from_pyc = _import(tmp_path, from_pyc=True)
        assert _constants.contended(from_pyc.transform) == {}
        _loader(from_pyc.transform).close()
