"""What one epoch over a store costs in object storage (`epoch_cost`, `zrecord cost`): requests
and bytes counted from where the records lie, per record and by blocks of consecutive records."""

from __future__ import annotations

import json

import numpy as np
import pytest

import zrecord
from zrecord import Dense, Ragged, epoch_cost
from zrecord.cli import main


@pytest.fixture
def tokens(tmp_path):
    """1,000 Ragged records of 1..40 int32 tokens, raw, 4 shards (each append split in 4 runs)."""
    rng = np.random.default_rng(3)
    path = tmp_path / "tokens"
    with Ragged.create(path, np.int32, 1, codec="raw", data_shards=4) as w:
        for _ in range(4):
            w.append([np.arange(int(k), dtype=np.int32) for k in rng.integers(1, 41, 250)])
    return path


def _runs(store, block: int, gap: int, most: int) -> tuple[int, int]:
    """The requests of reading every block, counted record by record as the mirror makes them
    (the definition): a record joins the request before it if it lies in its shard, within
    `gap` of its end, and the request then spans at most `most` bytes."""
    requests = nbytes = 0
    n = len(store)
    for start in range(0, n, block):
        recs = np.arange(start, min(n, start + block), dtype=np.uint64)
        shards, offsets, sizes = store._locations(recs)
        places = sorted((int(s), int(o), int(z)) for s, o, z in zip(shards, offsets, sizes) if z)
        run = None
        for shard, offset, size in places:
            if run and run[0] == shard and offset <= run[2] + gap and offset + size - run[1] <= most:
                run[2] = offset + size
                continue
            if run:
                requests, nbytes = requests + 1, nbytes + run[2] - run[1]
            run = [shard, offset, offset + size]
        if run:
            requests, nbytes = requests + 1, nbytes + run[2] - run[1]
    return requests, nbytes


def test_per_record_and_block_requests_are_counted_from_where_records_lie(tokens):
    with zrecord.open_store(tokens) as store:
        stored = store.stored_bytes
        per_record, blocks = epoch_cost(store, block_records=100)
        assert (per_record.requests, per_record.bytes) == (1000, stored)
        assert per_record.usd == pytest.approx(1000 / 1e6 * 0.40)
        # Blocks of 100 records: one request per run of a shard within a block; the writer
        # laid each append's 250 records out in 4 runs, so some blocks span two shards.
        assert (blocks.requests, blocks.bytes) == _runs(store, 100, 0, 8 << 20)
        assert 10 <= blocks.requests < 30 and blocks.bytes == stored
        assert blocks.amplification == 1.0
        # A request of at most 1 KiB splits the runs; by byte size: block_records_for.
        small = epoch_cost(store, block_records=100, request_bytes_max=1024)[1]
        assert small.requests == _runs(store, 100, 0, 1024)[0] > blocks.requests
        sized = epoch_cost(store, block_bytes=stored // 10)[1]
        assert sized.block_records == zrecord.block_records_for(1000, stored, stored // 10) == 99
        assert epoch_cost(store, block_bytes=None) == [per_record]


def test_a_block_of_one_shard_run_is_one_request_split_at_the_largest(tmp_path):
    path = tmp_path / "d"
    with Dense.create(path, np.uint8, (100,), codec="raw", data_shards=1) as w:
        w.append(np.zeros((50, 100), np.uint8))
    with zrecord.open_store(path) as store:
        # One shard, records back to back: a block of 10 is one request of 1,000 bytes...
        per_record, blocks = epoch_cost(store, block_records=10)
        assert (blocks.requests, blocks.bytes, per_record.requests) == (5, 5000, 50)
        # ... or 4 of at most 300 bytes.
        assert epoch_cost(store, block_records=10, request_bytes_max=300)[1].requests == 20


@pytest.mark.parametrize(("data_shards", "runs"), [(1, 5), (4, 8)])
def test_blocks_say_in_how_many_runs_of_the_layout_their_records_lie(tmp_path, capsys, data_shards, runs):
    """A writer of 4 data files cuts each write into 4 runs, one to each file: 5 blocks of
    10 records written in one append of 50 lie in 8 runs (records 0-11, 12-24, 25-36, 37-49),
    each a request; in one file, in 5."""
    path = tmp_path / "d"
    with Dense.create(path, np.uint8, (100,), codec="raw", data_shards=data_shards) as w:
        w.append(np.zeros((50, 100), np.uint8))
    with zrecord.open_store(path) as store:
        per_record, blocks = epoch_cost(store, block_records=10)
        assert (blocks.blocks, blocks.runs, blocks.requests) == (5, runs, runs)
        assert (per_record.blocks, per_record.runs) == (None, None)
        # No gap joins two files' runs.
        assert epoch_cost(store, block_records=10, gap_bytes=2500)[1].runs == runs
    assert main(["cost", str(path), "--block-bytes", "1000"]) == 0
    out = capsys.readouterr().out
    assert ("5 blocks whose records lie in 8 runs" in out) == (data_shards == 4)
    assert ("Laying out a store for reading by blocks" in out) == (data_shards == 4)
    assert ("the store's layout splits its blocks" in out) == (data_shards == 4)


def test_a_datasets_blocks_split_by_its_parts_are_not_put_down_to_the_layout(tmp_path, capsys):
    """Found in review. Was: a dataset of one-file parts was said to have its blocks split by
    "the store's layout", where its parts' ends split them."""
    for k in range(3):
        with Dense.create(tmp_path / "ds" / f"p{k}", np.uint8, (100,), codec="raw", data_shards=1) as w:
            w.append(np.zeros((15, 100), np.uint8))
    zrecord.publish_dataset(tmp_path / "ds", ["p0", "p1", "p2"])
    assert main(["cost", str(tmp_path / "ds"), "--block-bytes", "1000"]) == 0
    out = capsys.readouterr().out
    assert "its parts' ends and their layout split its blocks" in out
    assert "the store's layout" not in out


@pytest.mark.remote
def test_cost_by_url_fetches_only_index_parts(tokens, http_folder):
    for f in tokens.iterdir():
        http_folder.write(f"t/{f.name}", f.read_bytes())
    with zrecord.open_store(tokens) as local, zrecord.open_store(http_folder.url_for("t")) as remote:
        assert epoch_cost(remote, block_records=64) == epoch_cost(local, block_records=64)
        assert remote.remote_stats()["requests"] == 0   # no record fetched, only the index
        # The payload's amplification: bytes fetched per stored byte asked for.
        idx = np.arange(0, 1000, 7)
        remote[idx]
        stats = remote.remote_stats()
        shards, offsets, sizes = local._locations(idx.astype(np.uint64))
        assert stats["delivered_bytes"] == int(sizes.sum()) <= stats["bytes"]


@pytest.mark.remote
@pytest.mark.parametrize("size, most", [(600, 1000), (2500, 1000), (100, 1000)])
def test_the_block_estimate_counts_the_requests_the_mirror_makes(http_folder, tmp_path, size, most):
    """Records back to back, blocks of 4, requests of at most `most` bytes: the mirror never
    splits a record, so records of 600 bytes go one per request (the estimate said 3 a block
    of 2,400 bytes) and records of 2,500 bytes one each (it said 10 a block)."""
    with Dense.create(tmp_path / "d", np.uint8, (size,), codec="raw", data_shards=1) as w:
        w.append(np.arange(12 * size, dtype=np.uint64).astype(np.uint8).reshape(12, size))
    for f in (tmp_path / "d").iterdir():
        http_folder.write(f"c{size}/{f.name}", f.read_bytes())
    options = {"gap_bytes": 0, "request_bytes_max": most, "cache_dir": str(tmp_path / "m")}
    with zrecord.open_store(http_folder.url_for(f"c{size}"), storage_options=options) as remote:
        blocks = epoch_cost(remote, block_records=4, request_bytes_max=most)[1]
        for start in range(0, 12, 4):
            remote[np.arange(start, start + 4)]
        stats = remote.remote_stats()
        assert (blocks.requests, blocks.bytes) == (stats["requests"], stats["bytes"])
        assert blocks.requests == _runs(remote, 4, 0, most)[0]


def test_bad_settings_are_clear_errors(tokens):
    with zrecord.open_store(tokens) as store:
        with pytest.raises(ValueError, match="unknown price 'aws'; known: s3-standard"):
            epoch_cost(store, price="aws")
        with pytest.raises(ValueError, match="block_records must be at least 1; got 0"):
            epoch_cost(store, block_records=0)
        with pytest.raises(ValueError, match="request_bytes_max must be at least 1"):
            epoch_cost(store, request_bytes_max=0)


def test_the_cost_command(tokens, capsys):
    assert main(["cost", str(tokens), "--block-bytes", "1K"]) == 0
    out = capsys.readouterr().out
    assert "1,000 records" in out and "per record" in out and "blocks of" in out and "$0.00" in out
    assert main(["cost", str(tokens), "--usd-per-million-gets", "1000000", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    per_record, blocks = result["epochs"]
    assert per_record["requests"] == 1000 and per_record["usd"] == pytest.approx(1000.0)
    assert blocks["how"] == "blocks" and blocks["block_records"] == 1000   # 8 MiB: the store
    assert result["price"]["usd_per_million_gets"] == 1e6


@pytest.mark.parametrize("value", ["nan", "inf", "1e400", "-1", "cheap"])
def test_the_cost_command_refuses_a_price_that_is_no_amount(tokens, capsys, value):
    """Was: nan and inf printed "$nan" (and a traceback with --json), -1 a negative bill."""
    for option in ("--usd-per-million-gets", "--usd-per-gb"):
        with pytest.raises(SystemExit) as exit_:
            main(["cost", str(tokens), option, value, "--json"])
        assert exit_.value.code == 2
        assert f"argument {option}: invalid price {value!r}" in capsys.readouterr().err
    with pytest.raises(ValueError, match="usd_per_gb must be a finite number"):
        zrecord.Price(0.4, float("nan"))


def test_a_price_given_in_part_keeps_the_rest_of_the_named_one(tokens, capsys):
    """--usd-per-gb alone replaces the bytes' price of --price and keeps its GETs' price. Was:
    the GETs' price became $0 and --price was ignored; and S3 Express's $0.0006 per GB was
    shown as $0.001."""
    assert main(["cost", str(tokens), "--price", "s3-express", "--usd-per-gb", "0.002", "--json"]) == 0
    price = json.loads(capsys.readouterr().out)["price"]
    assert (price["usd_per_million_gets"], price["usd_per_gb"]) == (0.03, 0.002)
    assert main(["cost", str(tokens), "--price", "s3-express"]) == 0
    assert "($0.03 per million GETs, $0.0006 per GB)" in capsys.readouterr().out


@pytest.mark.parametrize("option", ["--block-bytes", "--request-bytes-max"])
def test_the_cost_command_refuses_a_size_of_zero_as_a_usage_error(tokens, capsys, option):
    with pytest.raises(SystemExit) as exit_:
        main(["cost", str(tokens), option, "0"])
    assert exit_.value.code == 2
    assert f"argument {option}: invalid size '0': at least 1 byte" in capsys.readouterr().err


# --- [O3] point 3: the request cost model's gap -------------------------------------------


def test_the_join_gap_is_the_cheaper_of_a_round_trip_and_a_request_in_bytes():
    # S3 Standard bills no bytes in the region: the round trip bounds it (25 ms x 80 MB/s).
    assert zrecord.LINKS["s3-standard"].join_gap() == 2_000_000
    # S3 Express bills $0.03 per million GETs and $0.0006 per GB: a GET costs 50 KB.
    assert zrecord.LINKS["s3-express"].join_gap() == 50_000
    # Requests in flight by Little's law: the rate the link takes times a request's time.
    s3 = zrecord.LINKS["s3-standard"]
    assert s3.in_flight(150_528) == 148  # 5,500 GETs/s x (25 ms + 1.9 ms)
    assert s3.in_flight(227) == 138  # 5,500 GETs/s x 25 ms: the request rate bounds it
    assert s3.in_flight(8 << 20) == 20  # 149 GETs/s (10 Gbit/s) x (25 ms + 105 ms)
    own = zrecord.Link(0.010, 1e9, zrecord.Price(1.0, 1.0))
    assert own.join_gap() == 1_000  # $1e-6 a request = 1,000 bytes at $1 per GB
    assert zrecord.link_of("gcs-standard") is zrecord.LINKS["gcs-standard"]
    with pytest.raises(ValueError, match="unknown link 's4'; known: s3-standard"):
        zrecord.link_of("s4")


@pytest.mark.remote
def test_a_link_makes_auto_gaps_join_what_costs_less_than_a_request(http_folder, tmp_path):
    """Records 100 KB apart: by default (gap at most 64 KiB) each costs a request; with the S3
    Standard link (gap 2 MB) one request reads them all; an unknown link is refused."""
    folder = http_folder.path / "s"
    with Dense.create(folder, np.uint8, (10_000,), codec="raw", data_shards=1) as w:
        w.append(np.arange(200 * 10_000, dtype=np.int64).astype(np.uint8).reshape(200, 10_000))
    url = http_folder.url_for("s")
    idx = np.arange(0, 200, 10)  # 20 records, 90 KB between neighbours
    counts = {}
    for link in (None, "s3-standard"):
        opts = {"cache_dir": str(tmp_path / f"c-{link}"), "link": link}
        with Dense.open(url, storage_options=opts) as ds:
            got = ds[idx]
            counts[link] = ds.remote_stats()["requests"]
            # max_in_flight "auto": 64, or what the link keeps busy for the mean record.
            assert ds._remote.in_flight == (64 if link is None else
                                            zrecord.LINKS[link].in_flight(10_000))
        with Dense.open(folder) as local:
            np.testing.assert_array_equal(got, local[idx])
    assert counts == {None: 20, "s3-standard": 1}
    with pytest.raises(ValueError, match="storage option link: unknown link 'nope'"):
        Dense.open(url, storage_options={"link": "nope"})


@pytest.mark.remote
@pytest.mark.parametrize("budget", [None, 64 << 20], ids=["by-part", "budget"])
def test_records_a_joined_request_read_through_are_held_not_fetched_again(http_folder, tmp_path, budget):
    """A GET joined through a gap writes the records in the gap too: they are held (by part,
    once their index parts are), so reading them later costs no request; a record outside the
    GET still does."""
    folder = http_folder.path / "s"
    data = (np.arange(200 * 10_000, dtype=np.int64) % 251).astype(np.uint8).reshape(200, 10_000)
    with Dense.create(folder, np.uint8, (10_000,), codec="raw", data_shards=1) as w:
        w.append(data)
    opts = {"cache_dir": str(tmp_path / "c"), "link": "s3-standard", "cache_bytes": budget}
    with Dense.open(http_folder.url_for("s"), storage_options=opts) as ds:
        np.testing.assert_array_equal(ds[np.array([0, 40])], data[[0, 40]])
        assert ds.remote_stats()["requests"] == 1
        np.testing.assert_array_equal(ds[np.arange(41)], data[:41])
        assert ds.remote_stats()["requests"] == 1
        np.testing.assert_array_equal(ds[np.array([41])], data[[41]])
        assert ds.remote_stats()["requests"] == 2


@pytest.mark.remote
def test_a_budget_reads_no_gap_it_cannot_hold(http_folder, tmp_path):
    """With cache_bytes, the gaps a link's gap rule would read through are read only where the
    budget has room for their bytes too: four records 1.5 MB apart are one GET of 4.6 MB in a
    budget of 16 MiB, and four GETs in one of 4 MiB, whose mirror stays within it."""
    folder = http_folder.path / "s"
    data = (np.arange(200 * 100_000, dtype=np.int64) % 253).astype(np.uint8).reshape(200, 100_000)
    with Dense.create(folder, np.uint8, (100_000,), codec="raw", data_shards=1) as w:
        w.append(data)
    idx = np.array([0, 15, 30, 45])
    for budget, requests in ((16 << 20, 1), (4 << 20, 4)):
        opts = {"cache_dir": str(tmp_path / f"c{budget}"), "link": "s3-standard", "cache_bytes": budget}
        with Dense.open(http_folder.url_for("s"), storage_options=opts) as ds:
            np.testing.assert_array_equal(ds[idx], data[idx])
            stats = ds.remote_stats()
            assert (stats["requests"], stats["cache_bytes"] <= budget) == (requests, True)
