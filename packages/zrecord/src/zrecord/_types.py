"""The types of zrecord's public parameters, named once: what ``create``, ``open``,
``open_store``, ``publish`` and the other entry points accept, as a type checker sees it.

Invariants of this module:
- Each alias is what the run-time check of that parameter accepts (``_dtypes``, ``_paths``,
  ``_remote``), no wider: a value a type checker accepts is one the call accepts, but for its
  value ranges (a negative shard count, a missing folder), which only the call can judge.
- ``Literal`` types list the words a parameter takes; the run-time checks raise on any other,
  naming what was given, for callers that are not type-checked.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Literal, SupportsIndex, TypedDict

import numpy.typing as npt

from zrecord._cost import Link

# A path of the local file system, as ``open()`` takes it (bytes are decoded as the OS does).
PathLike = str | bytes | os.PathLike[str] | os.PathLike[bytes]
# A local path, or (where a store is read) the URL of one: s3://bucket/prefix, http(s)://...
StoreLocation = PathLike
# A NumPy dtype or anything np.dtype() turns into one (np.float32, "<f4", "uint8").
DTypeLike = npt.DTypeLike
# A Dense record's shape: a sequence of sizes, or one int for one axis; () for scalars.
ItemShape = SupportsIndex | Sequence[SupportsIndex]
# How records are stored (zrecord.CODECS lists the same words at run time).
Codec = Literal["raw", "zstd", "zstd_dict"]
# How records reach memory: through the page cache, or around it (O_DIRECT) for large ones.
CacheMode = Literal["auto", "bypass"]
# Whether open may rely on a validation of index.zri that this user's readers remembered.
Validate = Literal["cached", "full"]
# The folder of compact index files: "auto" (the environment's, else the user's cache), a
# folder, or None for none.
IndexCache = Literal["auto"] | PathLike | None
DictBytes = bytes | bytearray | memoryview


class StorageOptions(TypedDict, total=False):
    """``storage_options`` of a store opened by URL, or of ``publish`` (the object-storage
    guide describes each key and its default)."""

    # The S3 client: endpoint (MinIO, a local server), region and credentials; without
    # them, the AWS_* variables and ~/.aws files are read, as AWS's own tools do.
    endpoint_url: str
    region: str
    aws_access_key_id: str
    aws_secret_access_key: str
    aws_session_token: str
    skip_signature: bool
    # Requests: how many in flight ("auto": 64, or with a link what its rate and latency keep
    # busy), how far apart neighbours may be to share one ranged GET
    # ("auto": the store's mean stored record, at most 64 KiB), the largest GET.
    max_in_flight: int | Literal["auto"]
    gap_bytes: int | Literal["auto"]
    request_bytes_max: int
    timeout_s: float
    connect_timeout_s: float
    retries: int
    retry_timeout_s: float
    # The mirror: a folder that processes of the host share (None: a private temporary one),
    # and its byte budget (None: unbounded).
    cache_dir: PathLike | None
    cache_bytes: int | None
    # The request cost model's link: a name of zrecord.LINKS ("s3-standard", "s3-express",
    # "gcs-standard") or a zrecord.Link; with it, "auto" gap_bytes is Link.join_gap().
    link: str | Link | None
