import numpy as np
from loaderx.zrecord import Dense

data = np.arange(64, dtype=np.float32).reshape(8, 2, 4)
with Dense.create('data', data.dtype, data.shape[1:], codec='zstd') as ds:
    ds.append(data)
with Dense.open('data') as ds:
    record = ds[0]                    # ndarray (2, 4), no leading batch axis
    batch = ds[0, 5, 2]               # ndarray (3, 2, 4), requested order retained
    for record in ds:                 # each record is ndarray (2, 4)
        consume(record)
