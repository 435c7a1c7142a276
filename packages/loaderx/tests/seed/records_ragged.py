from loaderx.zrecord import Ragged

seqs = [np.arange(L, dtype=np.int32) for L in (3, 1, 4, 1, 5)]
with Ragged.create('tokens', np.int32, ndim=1, codec='zstd') as rs:
    rs.append(seqs)                       # dtype/rank fixed; lengths remain per-record
with Ragged.open('tokens') as rs:
    record = rs[2]                    # ndarray (4,), not a one-element list
    records = rs[0, 2, 4]             # list of ndarray, exact per-record shapes
    for record in rs:                 # each item is one shape-restored ndarray
        consume(record)

lengths = np.array([len(r) for r in records])
padded = np.zeros((len(records), lengths.max()), dtype=records[0].dtype)
for i, r in enumerate(records):
    padded[i, :len(r)] = r             # (B, max_len) — your policy, your loop
