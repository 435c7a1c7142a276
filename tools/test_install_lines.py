"""tools/install_lines.py: which lines it collects from pages and code, and what it refuses in
pip's report (the resolution itself runs in the `wheelhouse` session)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import install_lines as il  # noqa: E402

PAGE = """Install it:

```sh
python -m venv env && env/bin/pip install ./packages/zrecord \\
    './packages/loaderx[ray]'   # from a clone
```

```python
print("pip install nothing")  # a Python block is no shell
```

Or `pip install
'./packages/zrecord[remote]'`, and `pip install --dry-run` only mentions the command.
"""

SOURCE = '''
def f():
    """Needs Pillow: ``pip install 'pillow>=10'``."""
    raise ImportError("needs Ray (the ray extra): "
                      "pip install 'ray[data,train]>=2.60,<2.61'; or pip install torch (for torch)")
'''


def test_pages_give_block_commands_and_wrapped_spans():
    found = [args for _, text in il.markdown_commands(PAGE) for args in il.pip_args(text)]
    assert ["./packages/zrecord", "./packages/loaderx[ray]"] in found
    assert ["./packages/zrecord[remote]"] in found
    assert ["nothing"] not in found
    assert ["--dry-run"] in found and not il.has_target(["--dry-run"])


def test_code_gives_each_command_of_a_message_up_to_its_end():
    found = [args for _, text in il.python_commands(SOURCE) for args in il.pip_args(text)]
    assert found == [["pillow>=10"], ["ray[data,train]>=2.60,<2.61"], ["torch"]]


def _report(*items: tuple[str, str, str]) -> dict:
    return {"install": [{"metadata": {"name": name, "version": version},
                         "download_info": {"url": url}} for name, version, url in items]}


def test_our_packages_must_come_from_the_clone():
    ours = il.Ours.read(il.ROOT)
    pypi = ("loaderx", "2.8.6", "https://files.pythonhosted.org/loaderx-2.8.6.whl")
    wheel = Path("/w/loaderx-3.0.0a0-cp310-abi3-manylinux_2_28_x86_64.whl")
    args, used = il.swap_folders(("./packages/zrecord", "./packages/loaderx[ray]"),
                                 {il.ROOT / "packages" / "loaderx": wheel})
    assert args == ["./packages/zrecord", f"{wheel}[ray]"] and used == {wheel.as_uri(): {"ray"}}
    local = ("loaderx", str(ours.versions["loaderx"]), wheel.as_uri())
    line = il.Line(("loaderx[ray]",))
    assert "not this clone's packages/loaderx" in il.problems(line, _report(pypi), {}, ours, None)[0]
    assert il.problems(il.Line(("./packages/loaderx",)), _report(local), used, ours, None) == []
    # Asking for a version that is not ours is asking for the other project, on purpose.
    assert il.problems(il.Line(("loaderx==2.5.9",)), _report(pypi), {}, ours, None) == []
    # The docs' warning must stay true: it installs the other project, not ours.
    assert il.problems(il.Line(il.WARNING_LINE), _report(pypi), {}, ours, None) == []
    assert il.problems(il.Line(il.WARNING_LINE), _report(local), used, ours, None) != []
    # An extra the package lacks is only a warning of pip's: here it fails.
    report = _report(local)
    report["install"][0]["metadata"]["provides_extra"] = ["images"]
    assert il.unknown_extras(report, used) == ["loaderx has no extra 'ray'"]


def test_a_dependency_at_a_version_the_packages_refuse_fails():
    ours = il.Ours.read(il.ROOT)
    too_new = ("obstore", "9.0.0", "https://files.pythonhosted.org/obstore-9.0.0.whl")
    (problem,) = il.problems(il.Line(("obstore",)), _report(too_new), {}, ours, None)
    assert "obstore 9.0.0, which the packages refuse" in problem
