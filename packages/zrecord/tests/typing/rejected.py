"""Uses of zrecord's public types that a type checker must reject. Each marked line must get
exactly the error its marker names, ``# E: CODE`` or ``# E: CODE: TEXT`` (TEXT a part of
mypy's message), and no other line may get any: check_types.py runs mypy --strict on this
file and compares. Never run: every marked line fails at run time too (ModeError,
TypeError, AttributeError).
"""

from __future__ import annotations

import numpy as np

from zrecord import Dense, Ragged, StorageOptions, open_store


def readers_cannot_append(path: str, data: np.ndarray) -> None:
    reader = Dense.open(path)
    reader.append(data)  # E: attr-defined: "DenseReader" has no attribute "append"
    with Dense.open(path) as ds:
        ds.append(data)  # E: attr-defined: "DenseReader" has no attribute "append"
    Ragged.open(path).append([data])  # E: attr-defined: "RaggedReader" has no attribute "append"
    open_store(path).append(data)  # E: union-attr: has no attribute "append"


def writers_cannot_be_read(path: str) -> None:
    with Dense.create(path, np.uint8, (2,), codec="raw") as writer:
        _ = writer[0]  # E: index: Value of type "DenseWriter" is not indexable
        for _record in writer:  # E: attr-defined: "DenseWriter" has no attribute "__iter__"
            pass
        writer.verify()  # E: attr-defined: "DenseWriter" has no attribute "verify"
        writer.append([[1, 2]])  # E: arg-type: "append" of "DenseWriter" has incompatible type
    with Ragged.create(path, np.int32, 1, codec="raw") as ragged:
        _ = ragged[0:2]  # E: index: Value of type "RaggedWriter" is not indexable


def records_have_their_kind_s_types(path: str) -> None:
    dense = Dense.open(path)
    rag = Ragged.open(path)
    _ = rag[0:2].shape  # E: attr-defined: "list[ndarray
    batch: np.ndarray = rag[[0, 1]]  # E: assignment: has type "list[ndarray
    one: list[np.ndarray] = dense[0]  # E: assignment: expression has type "ndarray
    _ = dense["x"]  # E: index: Invalid index type "str" for "DenseReader"
    _ = dense[1.5]  # E: call-overload: No overload variant of "__getitem__"
    dense.shapes()  # E: attr-defined: "DenseReader" has no attribute "shapes"
    Dense(path)  # E: abstract: Cannot instantiate abstract class "Dense"
    print(batch, one)


def arguments_are_checked(path: str) -> None:
    Dense.create(path, np.uint8, (2,), codec="lz4")  # E: arg-type: Argument "codec" to "create" of "Dense"
    Dense.create(path, np.uint8, (2,))  # E: call-arg: Missing named argument "codec"
    Ragged.create(path, np.uint8, 1.5, codec="raw")  # E: arg-type: Argument 3 to "create" of "Ragged"
    Dense.open(path, cache="bypas")  # E: arg-type: Argument "cache" to "open" of "Dense"
    Ragged.open(path, validate="lazy")  # E: arg-type: Argument "validate" to "open" of "Ragged"
    open_store(3)  # E: arg-type: Argument 1 to "open_store"
    Dense.open(path, index_cache=5)  # E: arg-type: Argument "index_cache" to "open" of "Dense"
    Dense.open(path, storage_options={"endpoint": "http://x"})  # E: arg-type: "StorageOptions | None"
    Dense.open(path, storage_options={"max_in_flight": "64"})  # E: arg-type: "StorageOptions | None"
    bad: StorageOptions = {"endpoint": "http://x"}  # E: typeddict-unknown-key: "endpoint"
    print(bad)
