"""Run the code blocks of the documentation, as a reader would, and fail on the first error.

    python docs/tools/run_snippets.py                  # every page that has code blocks
    python docs/tools/run_snippets.py docs/index.md    # one page

Every ```python block of a page runs, in page order, in one namespace and one fresh
working directory per page, each page in its own interpreter. A page declares what its blocks
take for granted, and the rare block that cannot run here, with HTML comments (invisible on the
site and on the repository host):

- ``<!-- snippet-setup`` ... ``-->``: Python run in the page's namespace at that point, before
  the next block: the data a block uses without defining it (``images``, a model, ...).
  ``<!-- snippet-check`` ... ``-->`` is the same, placed after a block to assert that it did
  what the page says. The helpers of docs/tools/snippet_fixtures.py are importable.
- ``<!-- snippet: skip REASON -->`` directly above a block: the block is not run; the reason
  is printed. Use it only where running cannot work (a multi-host command, a Hub download).
- ``<!-- snippet: requires cuda -->``: run only where ``torch.cuda.is_available()``; reported
  as skipped elsewhere.
- ``<!-- snippet: run -->`` above a ```sh block: the block runs with bash, in the page's
  working directory (``sh`` blocks are not run otherwise: they install or build things).
- ``<!-- snippet: fresh -->``: a new namespace and working directory from this block on.

The home page's first Python block (docs/index.md), the example a new reader copies first,
must run for real: not skipped, and before anything installs the offline stand-in for the
Hugging Face Hub (``snippet_fixtures.offline_hub``). Every page runs with HF_HUB_OFFLINE=1, so
that block is checked to need no network. A later block may use the stand-in.

Other comments directly above a block (``<!-- ddp_gloo.py -->``) are ignored. The pages are
the published pages (docs/, without its tools) and the READMEs of the repository and of the
packages. ``nox -s docs`` runs this script with the three packages, torch and jax installed.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE_TIMEOUT_S = 900
HOME = ROOT / "docs" / "index.md"
_FENCE = re.compile(r"^(`{3,})(\S*)\s*$")
_DIRECTIVE = re.compile(r"^<!--\s*snippet:\s*(\S+)\s*(.*?)\s*-->\s*$")


@dataclass
class Block:
    line: int  # 1-based line of the opening fence (for a setup: of the comment)
    lang: str  # "python", "sh", or "setup"
    code: str
    directives: dict[str, str] = field(default_factory=dict)


def parse(text: str) -> list[Block]:
    """The runnable units of a page, in order: code blocks and hidden setup comments."""
    lines = text.splitlines()
    blocks: list[Block] = []
    pending: dict[str, str] = {}
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.strip() in ("<!-- snippet-setup", "<!-- snippet-check"):
            end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "-->"), None)
            if end is None:
                raise SystemExit(f"line {i + 1}: {line.strip()[5:]} comment without a closing -->")
            blocks.append(Block(i + 1, "setup", "\n".join(lines[i + 1:end]) + "\n"))
            pending = {}
            i = end + 1
            continue
        directive = _DIRECTIVE.match(line.strip())
        if directive:
            pending[directive.group(1)] = directive.group(2)
            i += 1
            continue
        fence = _FENCE.match(line)
        if fence:
            # The block ends at a line of the same backticks (a ```` fence can show ``` ones).
            end = next((j for j in range(i + 1, len(lines))
                        if lines[j].rstrip() == fence.group(1)), None)
            if end is None:
                raise SystemExit(f"line {i + 1}: unclosed code fence")
            blocks.append(Block(i + 1, fence.group(2), "\n".join(lines[i + 1:end]) + "\n",
                                pending))
            pending = {}
            i = end + 1
            continue
        if line.strip() and not (line.strip().startswith("<!--") and line.strip().endswith("-->")):
            pending = {}  # a directive applies only to the block right below it
        i += 1
    return blocks


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def run_page(page: Path, workdir: Path) -> list[dict[str, object]]:
    """Run one page's blocks in this process; one result per block."""
    results: list[dict[str, object]] = []
    namespace: dict[str, object] = {"__name__": "__main__"}
    cwd = workdir / "0"
    cwd.mkdir(parents=True)
    os.chdir(cwd)
    failed = False
    for block in parse(page.read_text()):
        where = f"{page.relative_to(ROOT)}:{block.line}"
        if "fresh" in block.directives:
            namespace = {"__name__": "__main__"}
            cwd = workdir / str(block.line)
            cwd.mkdir()
            os.chdir(cwd)
        runnable = block.lang in ("python", "py", "setup") or (
            block.lang in ("sh", "bash") and "run" in block.directives)
        if not runnable:
            continue
        if "skip" in block.directives:
            reason = block.directives["skip"]
            if not reason:
                results.append({"where": where, "status": "failed",
                                "detail": "snippet: skip needs a reason"})
                failed = True
            else:
                results.append({"where": where, "status": "skipped", "detail": reason})
            continue
        if block.directives.get("requires") == "cuda" and not _cuda():
            results.append({"where": where, "status": "skipped", "detail": "needs CUDA"})
            continue
        if failed:
            results.append({"where": where, "status": "not run", "detail": "an earlier block "
                            "of the page failed"})
            continue
        started = time.perf_counter()
        out = io.StringIO()
        try:
            if block.lang in ("sh", "bash"):
                done = subprocess.run(["bash", "-euo", "pipefail", "-c", block.code],
                                      capture_output=True, text=True, timeout=PAGE_TIMEOUT_S)
                out.write(done.stdout + done.stderr)
                if done.returncode != 0:
                    raise RuntimeError(f"bash exited {done.returncode}")
            else:
                code = compile(block.code, where, "exec")
                with contextlib.redirect_stdout(out):
                    exec(code, namespace)
        except BaseException:  # noqa: BLE001 - every failure of a snippet is reported
            failed = True
            results.append({"where": where, "status": "failed",
                            "detail": out.getvalue()[-4000:] + traceback.format_exc(limit=8)})
            continue
        results.append({"where": where, "status": "ok", "lang": block.lang,
                        "hub_stand_in": _hub_stand_in(),
                        "detail": f"{time.perf_counter() - started:.1f} s"})
    if page.resolve() == HOME:
        results += _first_example_problems(page, results)
    return results


def _hub_stand_in() -> bool:
    """Whether a block of this page has installed the offline Hub stand-in."""
    fixtures = sys.modules.get("snippet_fixtures")
    return bool(getattr(fixtures, "HUB_STAND_IN", False))


def _first_example_problems(page: Path, results: list[dict[str, object]]) -> list[dict[str, object]]:
    """A failure when the page's first Python block did not run for real (see the module
    docstring); none when it did."""
    first = next((b for b in parse(page.read_text()) if b.lang in ("python", "py")), None)
    if first is None:
        return []
    where = f"{page.relative_to(ROOT)}:{first.line}"
    result = next((r for r in results if r["where"] == where), None)
    if result is not None and result["status"] == "ok" and not result.get("hub_stand_in"):
        return []
    why = ("it did not run" if result is None or result["status"] != "ok"
           else "it ran with the offline Hub stand-in (snippet_fixtures.offline_hub)")
    return [{"where": where, "status": "failed",
             "detail": f"the home page's first example must run as printed, offline and "
                       f"without stand-ins, since a new reader copies it first; {why}. Give it "
                       "data made in the snippet, and show the Hub after it."}]


def pages() -> list[Path]:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from build_site import published, repository_files

    chosen = [rel for rel in repository_files()
              if rel.endswith(".md") and (published(rel) or rel == "README.md"
                                          or re.fullmatch(r"packages/[^/]+/README\.md", rel))]
    with_code = []
    for rel in sorted(chosen):
        if any(b.lang in ("python", "py", "setup") or "run" in b.directives
               for b in parse((ROOT / rel).read_text())):
            with_code.append(ROOT / rel)
    return with_code


def main(argv: list[str]) -> int:
    if argv[:1] == ["--page"]:  # the child: run one page, print its results as JSON
        page, workdir = Path(argv[1]), Path(argv[2])
        results = run_page(page, workdir)
        sys.stdout.flush()
        os.write(1, ("\n@@RESULTS@@" + json.dumps(results) + "\n").encode())
        os._exit(0)  # leftover threads of a failed snippet must not keep the page alive
    targets = [Path(a).resolve() for a in argv] or pages()
    counts = {"ok": 0, "skipped": 0, "failed": 0, "not run": 0}
    for page in targets:
        with tempfile.TemporaryDirectory(prefix="snippets-") as tmp:
            env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
                   "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "docs" / "tools"),
                                                               os.environ.get("PYTHONPATH")]))}
            started = time.perf_counter()
            try:
                done = subprocess.run([sys.executable, __file__, "--page", str(page), tmp],
                                      capture_output=True, text=True, env=env,
                                      timeout=PAGE_TIMEOUT_S)
                marker = done.stdout.rfind("@@RESULTS@@")
                if marker < 0:
                    results = [{"where": str(page.relative_to(ROOT)), "status": "failed",
                                "detail": f"the page's interpreter exited {done.returncode}:\n"
                                          + (done.stdout + done.stderr)[-4000:]}]
                else:
                    results = json.loads(done.stdout[marker + len("@@RESULTS@@"):])
            except subprocess.TimeoutExpired:
                results = [{"where": str(page.relative_to(ROOT)), "status": "failed",
                            "detail": f"timed out after {PAGE_TIMEOUT_S} s"}]
        print(f"{page.relative_to(ROOT)} ({time.perf_counter() - started:.0f} s)")
        for r in results:
            counts[str(r["status"])] += 1
            detail = str(r["detail"])
            if r["status"] == "failed":
                print(f"  FAILED {r['where']}\n" + "\n".join("    " + ln
                                                           for ln in detail.splitlines()))
            else:
                print(f"  {r['status']:8} {r['where']}  {detail.splitlines()[0] if detail else ''}")
    print(", ".join(f"{v} {k}" for k, v in counts.items()))
    return 1 if counts["failed"] or counts["not run"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
