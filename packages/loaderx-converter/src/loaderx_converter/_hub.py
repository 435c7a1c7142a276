"""Where a dataset comes from: the Hub at an exact commit, or a local folder or parquet files.

``huggingface()`` turns a revision (branch, tag or commit) into the commit hash it names
*now*, downloads exactly that snapshot with ``huggingface_hub`` (honouring the endpoint, token
and cache folder passed as arguments, so no process environment variable is needed) and lets
``datasets`` decode it from the local snapshot folder. The provenance travels on the returned
object as ``loaderx_provenance`` and ``convert`` writes it beside the stores.

Invariant: a dataset derived without rewriting its Arrow files (``cast_column``,
``select_columns``, ``rename_column``, ``select``, ``shuffle``, ...) keeps its provenance. The
attribute does not survive those calls (they return new objects), so the provenance is also
remembered by the Arrow files it was loaded from; a ``map`` or ``filter`` that writes new files
makes a dataset whose values the source no longer describes, and it gets none.
"""

from __future__ import annotations

import errno
import glob
import os
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from loaderx_converter.errors import ConversionError, HubError, SourceError, SourceNotFoundError

_COMMIT = re.compile(r"^[0-9a-f]{40}$")
# A Hub dataset id: owner/name, each part letters, digits, '_', '-' and '.', neither starting
# nor ending with '-' or '.' (the Hub's own rule, which also forbids '--' and '..', checked in
# is_hub_id). Everything else a user may give as a source (/abs, ./rel, ../up, ~/home, a/b/c,
# a bare name) is a local path.
_HUB_PART = r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?"
_HUB_ID = re.compile(rf"^{_HUB_PART}/{_HUB_PART}$")
PROVENANCE_ATTR = "loaderx_provenance"
# Arrow file (absolute path) -> the provenance of the dataset loaded from it, in this process.
_BY_FILE: dict[str, Provenance] = {}


@dataclass(frozen=True)
class Provenance:
    """Where a converted dataset came from; written to ``provenance.json`` by ``convert``."""

    source: str
    repo_id: str | None = None
    config: str | None = None
    revision: str | None = None
    requested_revision: str | None = None
    endpoint: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dictionary."""
        return asdict(self)


def _arrow_files(dataset: Any) -> list[str]:
    """The Arrow files behind every split of a Dataset or DatasetDict (empty when any split
    lives in memory)."""
    parts = dataset.values() if hasattr(dataset, "values") else [dataset]
    files: list[str] = []
    for part in parts:
        cached = getattr(part, "cache_files", None) or []
        if not cached:
            return []
        files += [os.path.abspath(entry["filename"]) for entry in cached]
    return files


def remember(dataset: Any, provenance: Provenance) -> None:
    """Attach `provenance` to `dataset` and remember it by the dataset's Arrow files."""
    setattr(dataset, PROVENANCE_ATTR, provenance)
    for name in _arrow_files(dataset):
        _BY_FILE[name] = provenance


def provenance_of(dataset: Any) -> Provenance | None:
    """The provenance of `dataset`: its own attribute, else the one its Arrow files were loaded
    with (when every file agrees), else None."""
    found = getattr(dataset, PROVENANCE_ATTR, None)
    if isinstance(found, Provenance):
        return found
    known = {_BY_FILE.get(name) for name in _arrow_files(dataset)}
    if len(known) == 1:
        (only,) = known
        return only
    return None


def is_hub_id(source: str) -> bool:
    """True when `source` is a bare Hub dataset id, ``owner/name`` (one slash, nothing before
    the owner: no ``/``, ``./``, ``../`` or ``~``); every other string is a local path."""
    return bool(_HUB_ID.match(source)) and "--" not in source and ".." not in source


def _check_hub_id(repo_id: Any, caller: str) -> None:
    """Refuse, before any cache path is built from it or the Hub is asked, a `repo_id` that is
    not ``owner/name``: a local path given to a Hub function gets a way to load it instead."""
    if isinstance(repo_id, str) and is_hub_id(repo_id):
        return
    given = repr(repo_id) if isinstance(repo_id, str) else type(repo_id).__name__
    hint = ("; a local save_to_disk folder or parquet file is loaded with from_local(path)"
            if isinstance(repo_id, str) else "")
    raise SourceError(f"{caller}: the Hub dataset id must be owner/name (e.g. ylecun/mnist); "
                      f"got {given}{hint}")


def _make_api(endpoint: str | None, token: str | None) -> Any:
    """The Hub client; tests replace this function with one returning a fake."""
    import huggingface_hub

    return huggingface_hub.HfApi(endpoint=endpoint, token=token)


def _offline() -> bool:
    import huggingface_hub

    check = getattr(huggingface_hub, "is_offline_mode", None)
    if callable(check):
        return bool(check())
    return bool(huggingface_hub.constants.HF_HUB_OFFLINE)


def _cached_commit(repo_id: str, revision: str, cache_dir: str | None) -> str | None:
    """The commit a branch or tag pointed to when it was last downloaded into the cache."""
    import huggingface_hub

    root = cache_dir or huggingface_hub.constants.HF_HUB_CACHE
    ref = os.path.join(root, "datasets--" + repo_id.replace("/", "--"), "refs", revision)
    try:
        with open(ref, encoding="ascii") as f:
            commit = f.read().strip()
    except OSError:
        return None
    return commit if _COMMIT.match(commit) else None


def resolve_revision(repo_id: str, revision: str, *, api: Any = None, cache_dir: str | None = None,
                     offline: bool | None = None) -> str:
    """The commit hash that `revision` of dataset `repo_id` names.

    A 40-hex commit is returned as it is. Offline, the cache's record of the branch or tag is
    used. Online, the Hub's dataset info is asked (``api.dataset_info(...).sha``). A `repo_id`
    that is not ``owner/name`` is a :class:`SourceError`.
    """
    _check_hub_id(repo_id, "resolve_revision")
    if _COMMIT.match(revision):
        return revision
    if offline if offline is not None else _offline():
        commit = _cached_commit(repo_id, revision, cache_dir)
        if commit is None:
            raise HubError(
                f"offline (HF_HUB_OFFLINE=1) and the cache has no record of revision {revision!r} "
                f"of dataset {repo_id!r}; download it once online, or pass the commit hash")
        return commit
    try:
        info = api.dataset_info(repo_id, revision=revision)
    except Exception as exc:  # noqa: BLE001 - every client failure becomes one clear error
        raise HubError(
            f"could not resolve revision {revision!r} of dataset {repo_id!r} on the Hub "
            f"({type(exc).__name__}: {exc}). Without network, set HF_HUB_OFFLINE=1 to use the "
            "local cache") from exc
    sha = getattr(info, "sha", None)
    if not isinstance(sha, str) or not _COMMIT.match(sha):
        raise HubError(f"the Hub returned no commit hash for {repo_id!r} at {revision!r}: {sha!r}")
    return sha


def huggingface(repo_id: str, *, revision: str = "main", config: str | None = None,
                token: str | None = None, endpoint: str | None = None,
                cache_dir: str | None = None) -> Any:
    """Download dataset `repo_id` at the commit `revision` names now and return its DatasetDict.

    `endpoint` selects a mirror or a private Hub (e.g. ``"https://hf-mirror.com"``) and `token`
    a private or gated repository, both without environment variables. `config` selects a
    configuration when the repository has several. With ``HF_HUB_OFFLINE=1`` a populated cache
    is used and nothing is contacted. Fails fast with :class:`HubError` when neither works.
    `repo_id` is ``owner/name``; anything else (a local path: see :func:`from_local`) is a
    :class:`SourceError`, before anything is asked.
    """
    _check_hub_id(repo_id, "huggingface")
    import datasets
    import huggingface_hub

    offline = _offline()
    commit = resolve_revision(repo_id, revision, api=None if offline else _make_api(endpoint, token),
                              cache_dir=cache_dir, offline=offline)
    try:
        folder = huggingface_hub.snapshot_download(
            repo_id, repo_type="dataset", revision=commit, cache_dir=cache_dir, token=token,
            endpoint=endpoint, local_files_only=offline, etag_timeout=10)
    except Exception as exc:  # noqa: BLE001 - every download failure becomes one clear error
        where = "the local cache" if offline else (endpoint or "the Hub")
        raise HubError(f"could not get dataset {repo_id!r} at commit {commit} from {where} "
                       f"({type(exc).__name__}: {exc})") from exc
    loaded = _load(lambda: datasets.load_dataset(str(folder), name=config, cache_dir=cache_dir),
                   f"dataset {repo_id!r} at commit {commit}")
    if isinstance(loaded, datasets.Dataset):
        loaded = datasets.DatasetDict({str(loaded.split or "train"): loaded})
    remember(loaded, Provenance(source="huggingface", repo_id=repo_id, config=config,
                                revision=commit, requested_revision=revision, endpoint=endpoint))
    return loaded


def _load(load: Callable[[], Any], what: str) -> Any:
    """``load()``, with the errors by which ``datasets`` (and pyarrow under it) refuse a source
    (an unknown configuration, a file that is not parquet, an empty parquet file, a split with
    no files: ValueError and its kin, its own DatasetGenerationError, an IndexError) as one
    :class:`SourceError` whose cause is theirs. Operating-system errors that have an errno
    (the system's), running out of memory, and the converter's own errors pass through."""
    import datasets

    refusals = (ValueError, TypeError, KeyError, IndexError,
                datasets.exceptions.DatasetGenerationError)
    try:
        return load()
    except refusals as exc:
        if isinstance(exc, ConversionError):
            raise
        raise SourceError(f"datasets could not load {what}: {type(exc).__name__}: "
                          f"{exc}") from exc


def from_local(path: str, *, config: str | None = None) -> Any:
    """Load a local ``save_to_disk`` folder, a parquet file, or a folder of parquet files.

    Returns a DatasetDict (a single dataset becomes split ``"train"``) with provenance. Nothing
    at `path` is a :class:`SourceNotFoundError` (a FileNotFoundError); a path that is none of
    these, or that ``datasets`` cannot load, a :class:`SourceError`.
    """
    import datasets

    path = os.fspath(path)
    if not os.path.exists(path):
        raise SourceNotFoundError(errno.ENOENT, "no such file or directory", path)
    what = repr(path) + (f" (config {config!r})" if config is not None else "")
    if os.path.isdir(path) and (os.path.exists(os.path.join(path, "dataset_dict.json"))
                                or os.path.exists(os.path.join(path, "state.json"))):
        loaded = _load(lambda: datasets.load_from_disk(path), what)
    elif os.path.isfile(path) and path.endswith(".parquet"):
        loaded = _load(lambda: datasets.Dataset.from_parquet(path), what)
    elif os.path.isdir(path) and glob.glob(os.path.join(path, "**", "*.parquet"), recursive=True):
        loaded = _load(lambda: datasets.load_dataset(path, name=config), what)
    else:
        raise SourceError(f"{path!r} is neither a save_to_disk folder nor parquet file(s)")
    if isinstance(loaded, datasets.Dataset):
        loaded = datasets.DatasetDict({str(loaded.split or "train"): loaded})
    remember(loaded, Provenance(source="local", repo_id=os.path.abspath(path), config=config))
    return loaded
