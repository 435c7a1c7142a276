"""tools/tidy.py on small trees with one deliberate violation each: every rule must report what
it is for, and stay quiet on code that keeps it. The `lint` session runs these before it runs
tidy on the repository."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tidy  # noqa: E402


def tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return tmp_path


def rules_reported(root: Path) -> list[tuple[str, str, int]]:
    return [(p.rule, p.path, p.line) for p in tidy.run(root, fmt=False)]


def zig_fn(name: str, body_lines: int) -> str:
    body = "".join(f"    _ = {i};\n" for i in range(body_lines))
    return f"fn {name}() void {{\n{body}}}\n"


def py_fn(name: str, body_lines: int) -> str:
    return f"def {name}():\n" + "".join(f"    x{i} = {i}\n" for i in range(body_lines))


CLEAN = {
    "zig/src/a.zig": '//! See b.zig, and `b.helper` for the rest.\n' + zig_fn("short", 60)
    + 'extern "c" fn used() void;\nfn calls() void {\n    used();\n}\n',
    "zig/src/b.zig": "pub fn helper() void {}\n",
    "zig/src/guard.c": "/* Called by a.zig's calls (a.calls). */\nint x;\n",
    "pkg/mod.py": py_fn("short", 68),
    "pkg/ext.pyx": "cdef int f(int x) nogil\n\ncdef int g(int y):\n" + "    y += 1\n" * 60 + "    return y\n",
    "docs/page.md": "The reader (`zig/src/a.zig`) ...\n",
    "README.md": "# The project\n",
    "noxfile.py": "",
}


def test_a_tree_that_keeps_the_rules_has_no_problem(tmp_path):
    assert rules_reported(tree(tmp_path, CLEAN)) == []


@pytest.mark.parametrize(("name", "text", "expected"), [
    ("zig/src/long.zig", zig_fn("long", 70), ("function-length", "zig/src/long.zig", 1)),
    ("pkg/long.py", "\n" + py_fn("long", 70), ("function-length", "pkg/long.py", 2)),
    ("pkg/long.pyx", "cpdef long_one(int n):\n" + "    n += 1\n" * 70, ("function-length", "pkg/long.pyx", 1)),
    ("zig/src/wide.zig", "const x = 1;\n// " + "w" * 118 + "\n", ("zig-line-length", "zig/src/wide.zig", 2)),
    ("zig/src/ext.zig", 'extern "c" fn forgotten(x: c_int) c_int;\n', ("zig-extern", "zig/src/ext.zig", 1)),
    ("zig/src/ref.zig", "// See gone.zig for the rest.\n", ("stale-reference", "zig/src/ref.zig", 1)),
    ("zig/src/decl.zig", "// b.moved does this now.\n", ("stale-reference", "zig/src/decl.zig", 1)),
    ("zig/src/c.c", "/* b.moved's caller. */\n", ("stale-reference", "zig/src/c.c", 1)),
    ("err.txt", "usage: zrecord cost\n", ("top-level-file", "err.txt", 1)),
    ("docs/old.md", "The loop lives in `zig/src/old_loop.zig`.\n", ("stale-reference", "docs/old.md", 1)),
])
def test_each_rule_reports_a_deliberate_violation(tmp_path, name, text, expected):
    root = tree(tmp_path, {**CLEAN, name: text})
    assert rules_reported(root) == [expected]


def test_a_function_of_exactly_the_limit_passes(tmp_path):
    root = tree(tmp_path, {**CLEAN, "zig/src/edge.zig": zig_fn("edge", 68), "pkg/edge.py": py_fn("edge", 69)})
    assert rules_reported(root) == []


def test_the_command_fails_on_a_violation_and_says_where(tmp_path, capsys, monkeypatch):
    root = tree(tmp_path, {**CLEAN, "zig/src/ext.zig": 'extern "c" fn forgotten() void;\n'})
    monkeypatch.setattr(sys, "argv", ["tidy.py", "--root", str(root), "--no-fmt"])
    assert tidy.main() == 1
    out = capsys.readouterr().out
    assert "zig/src/ext.zig:1: zig-extern: forgotten is declared extern and never called" in out
    assert out.rstrip().endswith("tidy: 1 zig-extern")
