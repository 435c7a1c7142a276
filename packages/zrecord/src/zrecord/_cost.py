"""What one epoch over a store costs in object storage: ranged GETs, bytes and money, for a
uniform shuffle (every record its own request) and for a shuffle that reads blocks of
consecutive records (loaderx's ``Sampler`` mode BLOCKS), from where the records lie.

Invariants of this module:
- The figures come from the store's own index, as the core locates each record (`_locations`
  of the reader: by URL, after fetching the index parts the records need), never from
  averages: a block whose records lie in two shard runs costs two requests.
- A block is ``block_records`` consecutive records, the sampler's (``block_records`` there,
  sized from ``block_bytes`` the same way: at least 1, ``block_bytes * records //
  stored_bytes``). Its records are read in requests of at most ``request_bytes_max``
  bytes, joining neighbours of one shard whose gap is at most ``gap_bytes``, as the mirror
  joins them: a request takes the records of a run in order while it spans at most
  ``request_bytes_max`` bytes, and never splits a record (one larger than that is one request
  of its own), so a run longer than that counts the requests the mirror cuts it into.
- Memory is bounded by ``_CHUNK_RECORDS`` locations at a time, whatever the store's size.
- Prices are per million GET requests and per GB (10^9 bytes) transferred; the named
  profiles are list prices as dated in ``PRICES``, and any can be given instead.
- What a run makes against these figures (measured; the object-storage guide, "The bill of
  an epoch"): record by record is one request per record, what a uniform shuffle makes when
  a batch's records seldom lie side by side; a small store makes fewer (neighbours in one
  batch share a request). By blocks is each block read whole, the fewest a BLOCKS epoch can
  make, which a run makes only where its mirror plans whole blocks ahead: under a
  ``cache_bytes`` budget of two windows or more, and about that many only with large blocks.
"""

from __future__ import annotations

import dataclasses
import math
import operator
from typing import Any

import numpy as np

# Records located at a time.
_CHUNK_RECORDS = 1 << 20
# What the DataLoader's BLOCKS sampler reads at once unless told otherwise (loaderx's
# block_records default block_bytes).
BLOCK_BYTES_DEFAULT = 8 << 20
# The mirror's largest ranged GET (storage_options request_bytes_max's default).
REQUEST_BYTES_MAX_DEFAULT = 8 << 20


@dataclasses.dataclass(frozen=True)
class Price:
    """What a provider bills: US dollars per million GET requests and per GB transferred."""

    usd_per_million_gets: float
    usd_per_gb: float
    source: str = "given"

    def __post_init__(self) -> None:
        for name in ("usd_per_million_gets", "usd_per_gb"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not math.isfinite(value) or value < 0:
                raise ValueError(f"Price {name} must be a finite number of US dollars, 0 or "
                                 f"more; got {value!r}")

    def usd(self, requests: int, nbytes: int) -> float:
        """The bill for `requests` GETs bringing `nbytes` bytes."""
        return requests / 1e6 * self.usd_per_million_gets + nbytes / 1e9 * self.usd_per_gb


# List prices of a GET (and of transfer to compute in the same region: none), as published
# for the US regions when this table was written (2026); check them for yours.
PRICES: dict[str, Price] = {
    "s3-standard": Price(0.40, 0.0, "Amazon S3 Standard, GET $0.0004 per 1,000, us-east-1"),
    "s3-express": Price(0.03, 0.0006, "Amazon S3 Express One Zone, GET $0.00003 per 1,000 and "
                        "data retrieval $0.0006 per GB, us-east-1"),
    "gcs-standard": Price(0.40, 0.0, "Google Cloud Storage Standard, class B $0.004 per 10,000"),
}


@dataclasses.dataclass(frozen=True)
class Link:
    """A link to object storage as the request cost model sees it: the time from a request to
    its first byte (``latency_s``), what one connection carries (``connection_bytes_per_s``),
    and what the provider bills (``price``).

    The model: two wanted byte ranges of one object, `gap` bytes apart, are read by one
    request through the gap when that costs less than a second request, in time and in money.
    In time, a second request costs a round trip, in which one connection carries
    ``latency_s * connection_bytes_per_s`` bytes; in money, a request costs what
    ``usd_per_million_gets / 1e6 / (usd_per_gb / 1e9)`` bytes of transfer cost (no bound where
    bytes are free). ``join_gap()`` is the smaller: about 2 MB on S3 Standard, 50 KB on S3
    Express (whose bytes are billed)."""

    latency_s: float
    connection_bytes_per_s: float
    price: Price
    # What the host's network carries (10 Gbit/s), and the most GETs a second the provider
    # serves (S3: 5,500 a second per prefix).
    host_bytes_per_s: float = 1.25e9
    requests_per_s_max: float = 5500.0
    source: str = "given"

    def in_flight(self, request_bytes: float) -> int:
        """Requests to keep in flight for requests of `request_bytes` (Little's law): the
        request rate the link can take (the host's bytes a second over the request size, at
        most ``requests_per_s_max``) times the time one request takes (the latency plus its
        bytes at one connection's rate); 1 to 1,024. About 150 for records of a few hundred
        bytes to a few hundred KB on S3 Standard, 20 for 8 MiB requests."""
        size = max(1.0, float(request_bytes))
        rate = min(self.host_bytes_per_s / size, self.requests_per_s_max)
        return max(1, min(1024, math.ceil(rate * (self.latency_s + size / self.connection_bytes_per_s))))

    def join_gap(self) -> int:
        """The largest gap worth reading through (the model above), in bytes."""
        by_time = self.latency_s * self.connection_bytes_per_s
        if self.price.usd_per_gb > 0:
            by_money = self.price.usd_per_million_gets / 1e6 / (self.price.usd_per_gb / 1e9)
            return round(min(by_time, by_money))
        return round(by_time)


# The cost model's links, by provider in one region: the prices of PRICES, and a time to first
# byte and a per-connection rate assumed from commonly reported figures (the same-region profile
# of the benchmarks' link proxy uses 25 ms and 640 Mbit/s); measure your own and give a Link.
LINKS: dict[str, Link] = {
    "s3-standard": Link(0.025, 80e6, PRICES["s3-standard"], source="S3 Standard in one region: 25 ms "
                        "to first byte, 80 MB/s per connection (assumed)"),
    "s3-express": Link(0.005, 80e6, PRICES["s3-express"], source="S3 Express One Zone in its zone: 5 ms "
                       "to first byte, 80 MB/s per connection (assumed)"),
    "gcs-standard": Link(0.030, 80e6, PRICES["gcs-standard"], source="GCS Standard in one region: 30 ms "
                         "to first byte, 80 MB/s per connection (assumed)"),
}


def link_of(link: str | Link) -> Link:
    """`link` itself, or the profile of ``LINKS`` it names (a ValueError naming the known
    ones otherwise)."""
    if isinstance(link, Link):
        return link
    if not isinstance(link, str) or link not in LINKS:
        raise ValueError(f"unknown link {link!r}; known: {', '.join(LINKS)}, or give a "
                         "Link(latency_s, connection_bytes_per_s, price)")
    return LINKS[link]


@dataclasses.dataclass(frozen=True)
class EpochCost:
    """One epoch (every record read once) in one way of reading: ``requests`` ranged GETs
    bringing ``bytes`` bytes for ``stored_bytes`` of records; ``amplification`` is their
    ratio, ``usd`` the bill at `price`. By blocks, also how many ``blocks`` there are and
    in how many ``runs`` their records lie: a run is records stored back to back in one data
    file (joined across gaps of at most ``gap_bytes``), each one request or more, so
    ``runs / blocks`` above 1 is what the store's layout adds to the requests (a writer with
    several ``data_shards`` cuts each write into that many runs, one to each file)."""

    how: str
    records: int
    block_records: int | None
    requests: int
    bytes: int
    stored_bytes: int
    usd: float
    blocks: int | None = None
    runs: int | None = None

    @property
    def amplification(self) -> float:
        """Bytes fetched per stored byte of the records (1.0: nothing but the records)."""
        return self.bytes / self.stored_bytes if self.stored_bytes else 1.0

    def as_dict(self) -> dict[str, Any]:
        """The fields and the amplification, JSON-serialisable."""
        return {**dataclasses.asdict(self), "amplification": self.amplification}


def price_of(price: str | Price) -> Price:
    """`price` itself, or the profile of ``PRICES`` it names (a ValueError naming the known
    ones otherwise)."""
    if isinstance(price, Price):
        return price
    if price not in PRICES:
        raise ValueError(f"unknown price {price!r}; known: {', '.join(PRICES)}, or give a "
                         "Price(usd_per_million_gets, usd_per_gb)")
    return PRICES[price]


def block_records_for(records: int, stored_bytes: int, block_bytes: int) -> int:
    """Records per block of about `block_bytes` stored bytes (loaderx's block_records)."""
    if records < 1:
        return 1
    if stored_bytes <= 0:
        return max(1, min(records, block_bytes))
    return max(1, min(records, block_bytes * records // stored_bytes))


def epoch_cost(store: Any, *, block_bytes: int | None = BLOCK_BYTES_DEFAULT,
               block_records: int | None = None, gap_bytes: int = 0,
               request_bytes_max: int = REQUEST_BYTES_MAX_DEFAULT,
               price: str | Price = "s3-standard") -> list[EpochCost]:
    """What one epoch over `store` (an open zrecord store or dataset, local or by URL; a
    dataset's runs never join across its parts) costs: read
    record by record (a uniform shuffle), and, unless `block_bytes` and `block_records` are
    both None, by blocks of `block_records` consecutive records (from `block_bytes` when not
    given). See the module docstring for how requests are counted, and for when a run makes
    as many as these figures say."""
    price = price_of(price)
    gap_bytes = _at_least("gap_bytes", gap_bytes, 0)
    request_bytes_max = _at_least("request_bytes_max", request_bytes_max, 1)
    n, stored = len(store), int(store.stored_bytes)
    if block_records is None and block_bytes is not None:
        block_records = block_records_for(n, stored, _at_least("block_bytes", block_bytes, 1))
    elif block_records is not None:
        block_records = _at_least("block_records", block_records, 1)
    per_record = [0, 0]  # requests, bytes
    blocks = [0, 0, 0]  # requests, bytes, runs
    # Whole blocks per chunk, so that no block is split between two chunks.
    step = _CHUNK_RECORDS if block_records is None else \
        max(block_records, _CHUNK_RECORDS // block_records * block_records)
    for start in range(0, n, step):
        recs = np.arange(start, min(n, start + step), dtype=np.uint64)
        shards, offsets, sizes = store._locations(recs)
        nonempty = sizes > 0
        per_record[0] += int(np.count_nonzero(nonempty))
        per_record[1] += int(sizes.sum())
        if block_records is not None:
            r, b, runs = _block_requests(recs // np.uint64(block_records), shards, offsets, sizes,
                                         gap_bytes, request_bytes_max)
            blocks[0] += r
            blocks[1] += b
            blocks[2] += runs

    out = [EpochCost("per record", n, None, per_record[0], per_record[1], stored,
                     price.usd(per_record[0], per_record[1]))]
    if block_records is not None:
        out.append(EpochCost("blocks", n, block_records, blocks[0], blocks[1], stored,
                             price.usd(blocks[0], blocks[1]), -(-n // block_records), blocks[2]))
    return out


def _block_requests(block: np.ndarray, shards: np.ndarray, offsets: np.ndarray,
                    sizes: np.ndarray, gap_bytes: int, most: int) -> tuple[int, int, int]:
    """The requests and bytes that read every non-empty record, block by block, and the runs
    (records back to back in one shard, across gaps of at most `gap_bytes`) they lie in."""
    keep = sizes > 0
    block, shards, offsets, sizes = block[keep], shards[keep], offsets[keep], sizes[keep]
    if block.size == 0:
        return 0, 0, 0
    order = np.lexsort((offsets, shards, block))
    block, shards, offsets = block[order], shards[order], offsets[order]
    # Records of a shard do not overlap ([ZR-IDX-006]): in offset order each ends before the
    # next begins. A record starts a new run unless it follows one of its block and shard
    # within the gap.
    ends = offsets + sizes[order]
    new = np.ones(block.size, dtype=bool)
    new[1:] = (block[1:] != block[:-1]) | (shards[1:] != shards[:-1]) | \
        (offsets[1:] > ends[:-1] + np.uint64(gap_bytes))
    starts = np.flatnonzero(new)
    last = np.append(starts[1:], block.size) - 1
    spans = (ends[last] - offsets[starts]).astype(np.int64)
    short = spans <= most
    requests, nbytes = int(np.count_nonzero(short)), int(spans[short].sum())
    # A run longer than one request is cut as the mirror cuts it (Mirror._runs): each request
    # from the first record it lacks, while the span stays within `most`, at least one record.
    # There are at most stored bytes / `most` such runs, and as many requests in them.
    for a, b in zip(starts[~short].tolist(), (last[~short] + 1).tolist()):
        o, e = offsets[a:b].astype(np.int64), ends[a:b].astype(np.int64)
        at = 0
        while at < o.shape[0]:
            upto = max(at + 1, int(np.searchsorted(e, o[at] + most, side="right")))
            requests += 1
            nbytes += int(e[upto - 1] - o[at])
            at = upto
    return requests, nbytes, int(starts.size)


def _at_least(name: str, value: Any, least: int) -> int:
    try:
        number = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int; got {type(value).__name__}") from None
    if number < least:
        raise ValueError(f"{name} must be at least {least}; got {number}")
    return number
