"""The life of a store opened by URL beyond its reads: URLs refused before any request, a close
that races a gather, a process forked after reads, and readers of one mirror whose evictions
punch records out under each other. Each test forces its window by hooks and events, not by
timing."""

from __future__ import annotations

import numpy as np
import pytest

from zrecord import Dense, open_store, publish
from zrecord._remote import _Client, storage_settings
from zrecord.cli import main
from zrecord.errors import RemoteError

pytestmark = pytest.mark.remote

ORDER = ("index.zri", "data-000.zrd", "header.zrh")
# Records of 20,000 bytes: not a divisor of the mirror's chunks, so some records lie in two.
RECORD_BYTES = 20_000
RECORDS = 320  # 6.4 MB: more than the smallest budget (4 MiB), which the eviction tests use


@pytest.fixture(scope="module")
def straddling(tmp_path_factory):
    """A Dense raw store of one shard whose records straddle chunk boundaries."""
    root = tmp_path_factory.mktemp("remote-lifecycle")
    data = np.random.default_rng(11).integers(0, 255, (RECORDS, RECORD_BYTES), dtype=np.uint8)
    with Dense.create(root / "s", np.uint8, (RECORD_BYTES,), codec="raw", data_shards=1, index_cache=None) as w:
        w.append(data)
    return root / "s", data


def _serve(http_folder, folder, name: str = "s") -> str:
    for part in ORDER:
        http_folder.write(f"{name}/{part}", (folder / part).read_bytes())
    return http_folder.url_for(name)


# --- [R2] 8: a URL without a bucket or host ------------------------------------------------


@pytest.mark.parametrize("url", ["s3://", "s3:///prefix", "http://", "https://:443/x"])
def test_a_url_without_a_bucket_or_host_is_a_value_error_naming_it(url):
    """Was: "s3://" raised pyo3's PanicException (a BaseException) from inside obstore."""
    with pytest.raises(ValueError, match="names no (bucket|host)") as info:
        open_store(url, storage_options={"retries": 0})
    assert repr(url) in str(info.value)
    with pytest.raises(ValueError, match="names no (bucket|host)"):
        Dense.open(url, storage_options={"retries": 0})


def test_a_url_with_a_secret_and_no_host_is_named_without_the_secret():
    with pytest.raises(ValueError, match="names no host") as info:
        open_store("https://user:s3cret@/x?token=s3cret2")
    assert "s3cret" not in str(info.value) and "'https:///x'" in str(info.value)


def test_publish_to_a_url_without_a_bucket_is_a_value_error(straddling, capsys):
    folder, _ = straddling
    with pytest.raises(ValueError, match=r"names no bucket"):
        publish(folder, "s3://", storage_options={"retries": 0})
    assert main(["publish", str(folder), "s3://", "-q"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "zrecord publish: " in err and "names no bucket" in err


@pytest.mark.parametrize("url", ["s3://", "http://"])
def test_the_cli_says_one_line_for_a_url_without_a_bucket_or_host(url, capsys):
    assert main(["info", url]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("zrecord info: ") and "Traceback" not in err


def test_a_panic_in_the_client_is_a_remote_error_naming_the_url():
    """The safety net: whatever else makes obstore panic reaches the caller as a RemoteError
    (an Exception) naming the URL, not as a BaseException."""
    from obstore.store import HTTPStore

    client = _Client("http://127.0.0.1:9/store", storage_settings({"retries": 0}))
    client.store = HTTPStore.from_url("s3:")  # what "s3://" used to become: obstore panics on it
    with pytest.raises(RemoteError, match=r"http://127.0.0.1:9/store/header.zrh: .*panic") as info:
        client.get("header.zrh")
    assert isinstance(info.value, Exception)
