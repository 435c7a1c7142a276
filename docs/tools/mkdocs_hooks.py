"""mkdocs hooks of the documentation site (docs/mkdocs.yml, `hooks:`).

The staged pages keep their repository paths (docs/guides/loaderx.md, spec/format-v1.md,
packages/zrecord/CHANGELOG.md), so that every relative link written for the repository is also
checked by `mkdocs build --strict`. These hooks give the site its own addresses and send links
to repository files that are not published (example scripts, benchmark scripts, package
READMEs) to the repository host:

- ``on_files``: docs/X is served at X, packages/NAME/CHANGELOG.md at changelog/NAME/; the
  "edit" link of a page points at its repository path.
- ``on_page_markdown``: a relative link whose target is not a published file but exists in
  the checkout becomes ``repo_url/blob/main/PATH`` (``tree`` for a folder). A link to a path
  that exists nowhere is left alone, so the strict build fails on it.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

# [text](target) and [text](target "title"); images too. Code spans and fences are skipped by
# splitting them out first.
_LINK = re.compile(r"(!?\[[^\]]*\]\()([^)\s]+)((?:\s+\"[^\"]*\")?\))")
_CODE = re.compile(r"(^(`{3,}).*?^\2[ \t]*$|`[^`\n]+`)", re.M | re.S)


def _site_path(src_uri: str) -> str:
    """Where a staged file (by repository path) is served, before the .md -> .html step."""
    if src_uri.startswith("docs/"):
        return src_uri[len("docs/"):]
    parts = src_uri.split("/")
    if len(parts) == 3 and parts[0] == "packages" and parts[2] == "CHANGELOG.md":
        return f"changelog/{parts[1]}.md"
    return src_uri


def on_files(files: Any, config: Any) -> Any:
    for f in files:
        site = _site_path(f.src_uri)
        if f.is_documentation_page():
            stem = posixpath.splitext(site)[0]
            parent, name = posixpath.split(stem)
            if name in ("index", "README"):
                dest = posixpath.join(parent, "index.html")
            else:
                dest = posixpath.join(parent, name, "index.html")
        else:
            dest = site
        f.dest_uri = dest
        url = dest[: -len("index.html")] if dest.endswith("index.html") else dest
        f.url = url or "./"
        f.abs_dest_path = posixpath.normpath(posixpath.join(f.dest_dir, dest))
        if f.generated_by is None:
            f.edit_uri = f.src_uri
    return files


def _rewrite_links(markdown: str, page_src: str, docs_dir: Path, repo_url: str) -> str:
    base = posixpath.dirname(page_src)

    def link(match: re.Match[str]) -> str:
        target = match.group(2)
        if re.match(r"^[a-z][a-z0-9+.-]*:|^#|^/", target):
            return match.group(0)  # a URL, an anchor on this page, or an absolute path
        path, _, anchor = target.partition("#")
        rel = posixpath.normpath(posixpath.join(base, path))
        if rel.startswith("..") or (docs_dir / rel).exists():
            return match.group(0)
        in_repo = ROOT / rel
        if not in_repo.exists():
            return match.group(0)  # broken everywhere: the strict build reports it
        kind = "tree" if in_repo.is_dir() else "blob"
        url = f"{repo_url.rstrip('/')}/{kind}/main/{rel}" + (f"#{anchor}" if anchor else "")
        return f"{match.group(1)}{url}{match.group(3)}"

    out, last = [], 0
    for code in _CODE.finditer(markdown):  # code spans and fences are left as they are
        out += [_LINK.sub(link, markdown[last:code.start()]), code.group(0)]
        last = code.end()
    return "".join(out + [_LINK.sub(link, markdown[last:])])


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    return _rewrite_links(markdown, page.file.src_uri, Path(config["docs_dir"]),
                          config["repo_url"])
