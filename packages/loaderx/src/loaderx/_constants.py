"""A transform whose constants its threads would contend on, found before the loader starts.

The free-threaded CPython 3.13 (3.13t) makes the constants of a code object immortal (no
reference count to update) when it loads the code from a ``.pyc`` or compiles the main
script, but not when the code was compiled by ``compile()`` in this process: a module imported
with no up-to-date ``.pyc`` to read (``PYTHONDONTWRITEBYTECODE`` kept one from being written, or
its source changed since), ``exec``, a notebook's cells. Each use of such a constant (``1.0``,
``1000003``, ``[0.0] * n``) from the loader's threads then updates a reference count that the
threads share, and the transform runs at a fraction of its speed: measured on a Python text transform (benchmarks/loader/
bench_freethreaded.py), about 28 batches/s on two threads against 171 from the same module's
``.pyc``. The DataLoader warns once per module (docs/howto/tuning.md says what to do).

What is looked at: the modules the transform reaches (its own, and those of the functions and
modules its code names as globals or its closure holds), their functions and their classes'
methods, and the code nested in them. Only on 3.13t with the GIL off; elsewhere nothing is
looked at.
"""

from __future__ import annotations

import functools
import sys
import types
import warnings
from collections.abc import Callable, Iterator
from typing import Any

# The constants a hot loop uses over and over (a step, a weight, `[0.0] * n`); others are not
# looked at.
_NUMBERS = (int, float, complex)

_warned: set[str] = set()  # modules warned about in this process


def _applies() -> bool:
    """On a free-threaded CPython 3.13 running with the GIL off."""
    gil = getattr(sys, "_is_gil_enabled", None)
    return sys.version_info[:2] == (3, 13) and gil is not None and not gil()


def _is_immortal(obj: object) -> bool:
    """Whether `obj` is immortal: its reference count reads as None's, which is."""
    return sys.getrefcount(obj) == sys.getrefcount(None)


def _function_of(transform: Any) -> types.FunctionType | None:
    """The Python function that calling `transform` runs: itself, a bound method's, a
    ``functools.partial``'s, or the ``__call__`` of a callable object's class."""
    for _ in range(8):  # partials of partials, methods of partials: a few levels at most
        if isinstance(transform, types.FunctionType):
            return transform
        if isinstance(transform, types.MethodType):
            transform = transform.__func__
        elif isinstance(transform, functools.partial):
            transform = transform.func
        else:  # a callable object: the __call__ its class defines or inherits
            call = next((vars(k)["__call__"] for k in type(transform).__mro__
                         if "__call__" in vars(k)), None)
            return call if isinstance(call, types.FunctionType) else None
    return None


def _codes(code: types.CodeType) -> Iterator[types.CodeType]:
    """`code` and the code objects nested in it (functions, lambdas, comprehensions)."""
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)


def _numbers(const: object) -> Iterator[object]:
    """The number constants in `const` (a tuple's items, recursively)."""
    if isinstance(const, tuple):
        for item in const:
            yield from _numbers(item)
    elif type(const) in _NUMBERS:
        yield const


def mortal_constants(code: types.CodeType, immortal: Callable[[object], bool] = _is_immortal) -> int:
    """How many number constants of `code` (and of the code nested in it) are not immortal."""
    return sum(1 for c in _codes(code) for const in c.co_consts for n in _numbers(const)
               if not immortal(n))


def _module_functions(module: types.ModuleType) -> Iterator[types.FunctionType]:
    """The functions defined in `module`: its own, and the methods of its own classes."""
    name = module.__name__
    for value in list(vars(module).values()):
        if isinstance(value, types.FunctionType) and value.__module__ == name:
            yield value
        elif isinstance(value, type) and value.__module__ == name:
            for attr in list(vars(value).values()):
                if isinstance(attr, (staticmethod, classmethod)):
                    attr = attr.__func__
                if isinstance(attr, types.FunctionType):
                    yield attr


def reached_modules(transform: Any) -> list[types.ModuleType]:
    """The modules `transform` reaches by name: its function's module, and the modules of
    the functions and modules that its code (and the code nested in it) names as globals or
    holds in its closure (a transform made by a factory)."""
    fn = _function_of(transform)
    if fn is None:
        return []
    names: set[str | None] = {fn.__module__}
    values = [fn.__globals__.get(name) for code in _codes(fn.__code__) for name in code.co_names]
    for cell in fn.__closure__ or ():
        try:
            values.append(cell.cell_contents)
        except ValueError:  # a cell not yet filled
            continue
    for value in values:
        if isinstance(value, types.ModuleType):
            names.add(value.__name__)
        else:
            inner = _function_of(value) if callable(value) else None
            if inner is not None:
                names.add(inner.__module__)
    # A function made by exec without a __name__ in its globals has None for its module.
    return [sys.modules[n] for n in sorted(n for n in names if isinstance(n, str)) if n in sys.modules]


def contended(transform: Any, immortal: Callable[[object], bool] = _is_immortal) -> dict[str, int]:
    """Module name -> the number constants of its functions that are not immortal, for the
    modules `transform` reaches that hold any."""
    found = {}
    for module in reached_modules(transform):
        count = sum(mortal_constants(f.__code__, immortal) for f in _module_functions(module))
        if count:
            found[module.__name__] = count
    return found


def warn_if_contended(transform: Any, stacklevel: int) -> None:
    """On 3.13t with the GIL off: a RuntimeWarning naming the modules whose constants the
    loader's threads would contend on (module docstring), each once per process, attributed
    to the frame `stacklevel` above the caller."""
    if transform is None or not _applies():
        return
    found = {name: n for name, n in contended(transform).items() if name not in _warned}
    if not found:
        return
    _warned.update(found)
    listed = ", ".join(f"{name!r} ({n})" for name, n in sorted(found.items()))
    warnings.warn(
        f"the transform reaches code whose number constants are not immortal on this "
        f"free-threaded CPython 3.13: {listed}. Their code was compiled in this process instead "
        "of loaded from a .pyc (there was no up-to-date .pyc: PYTHONDONTWRITEBYTECODE kept one "
        "from being written, or the source changed since; or the code came from exec or a "
        "notebook cell), and every use of such a constant from the loader's threads updates a "
        "reference count the threads share: a Python text transform ran 6x slower on two "
        "threads. Load the module from a .pyc "
        "(`python -m compileall FOLDER` once; a .pyc is read even with "
        "PYTHONDONTWRITEBYTECODE set), or keep the transform's loops in the main script",
        RuntimeWarning, stacklevel=stacklevel + 1)
