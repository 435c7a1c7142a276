"""The user's examples (../shared/seed, sections "Records" and "Creating containers") verbatim.

Each file in seed/ is a code block copied byte for byte from the seed; this test runs it in a
fresh working directory. The names a block uses without defining (``consume``, ``images``,
``sequences``, and ``np`` in blocks that continue an earlier one) are provided here, exactly as
the surrounding prose of the seed describes them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

SEED = Path(__file__).parent / "seed"


def run_block(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **names) -> dict:
    monkeypatch.chdir(tmp_path)
    consumed: list[np.ndarray] = []
    namespace = {"__name__": "__seed__", "np": np, "consume": consumed.append, **names}
    code = compile((SEED / name).read_text(), str(SEED / name), "exec")
    exec(code, namespace)
    namespace["consumed"] = consumed
    return namespace


def test_records_dense(tmp_path, monkeypatch):
    ns = run_block("records_dense.py", tmp_path, monkeypatch)
    data = ns["data"]
    assert ns["batch"].shape == (3, 2, 4)
    np.testing.assert_array_equal(ns["batch"], data[[0, 5, 2]])
    assert [r.shape for r in ns["consumed"]] == [(2, 4)] * 8
    np.testing.assert_array_equal(np.stack(ns["consumed"]), data)


def test_records_ragged(tmp_path, monkeypatch):
    ns = run_block("records_ragged.py", tmp_path, monkeypatch)
    assert [r.shape for r in ns["records"]] == [(3,), (4,), (5,)]
    assert [r.tolist() for r in ns["consumed"]] == [[0, 1, 2], [0], [0, 1, 2, 3], [0],
                                                   [0, 1, 2, 3, 4]]
    np.testing.assert_array_equal(ns["padded"], [[0, 1, 2, 0, 0], [0, 1, 2, 3, 0],
                                                 [0, 1, 2, 3, 4]])


def test_creating_containers(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(10, 28, 28), dtype=np.uint8)
    sequences = (np.arange(n, dtype=np.int32) for n in (5, 0, 3))
    ns = run_block("creating_containers.py", tmp_path, monkeypatch, images=images,
                   sequences=sequences)
    np.testing.assert_array_equal(ns["first_four"], images[:4])
    from loaderx.zrecord import Ragged

    with Ragged.open(tmp_path / "tokens") as tok:
        assert [len(r) for r in tok] == [5, 0, 3]


def test_codec_notes(tmp_path, monkeypatch):
    """Train once on settled data, then install the dictionary in new stores."""
    rng = np.random.default_rng(1)
    vocab = rng.integers(0, 50_000, size=300, dtype=np.int32)
    settled = [vocab[rng.integers(0, 300, size=int(rng.integers(20, 120)))] for _ in range(3000)]
    settled_array = np.stack([np.resize(r, 64) for r in settled])        # (3000, 64) int32
    token_generator = (r for r in settled[:500])
    data = settled_array[:700]
    ns = run_block("codec_notes.py", tmp_path, monkeypatch, settled_array=settled_array,
                   token_generator=token_generator, data=data)
    from loaderx.zrecord import Dense, Ragged

    with Ragged.open(tmp_path / "tokens") as rs, Dense.open(tmp_path / "data") as ds:
        assert rs.codec == ds.codec == "zstd_dict"
        assert rs.dict_bytes == ds.dict_bytes == ns["d"]
        assert [r.tolist() for r in rs] == [r.tolist() for r in settled[:500]]
        np.testing.assert_array_equal(ds[:], data)


def test_codec_rewrite(tmp_path, monkeypatch):
    """Changing a store's codec means writing a new one; train_dict reads the open store."""
    from loaderx.zrecord import Dense

    rng = np.random.default_rng(2)
    source = rng.integers(0, 16, size=(2000, 96), dtype=np.int16)
    with Dense.create(tmp_path / "src", np.int16, (96,), codec="raw") as w:
        w.append(source)
    run_block("codec_rewrite.py", tmp_path, monkeypatch)
    with Dense.open(tmp_path / "dst") as d:
        assert d.codec == "zstd_dict" and d.dict_bytes
        np.testing.assert_array_equal(d[:], source)
        assert d.stored_bytes < source.nbytes


def test_quick_start(tmp_path, monkeypatch, capsys):
    rng = np.random.default_rng(0)
    np.save(tmp_path / "data.npy", rng.integers(0, 255, size=(600, 3, 8, 8), dtype=np.uint8))
    np.save(tmp_path / "label.npy", rng.integers(0, 10, size=(600,), dtype=np.int64))
    ns = run_block("quick_start.py", tmp_path, monkeypatch)
    assert capsys.readouterr().out.split("\n")[:2] == ["(256, 3, 8, 8)", "(256,)"]
    assert ns["i"] == 256 and ns["loader"].closed
    data = np.load(tmp_path / "data.npy")
    label = np.load(tmp_path / "label.npy")
    # The last batch (step 256) lines up across streams and matches the source.
    from loaderx.sampler import Sampler

    idx = Sampler(600, 256, Sampler.Mode.CYCLIC, seed=42).batch(256)
    np.testing.assert_array_equal(ns["batch"]["data"], data[idx])
    np.testing.assert_array_equal(ns["batch"]["label"], label[idx])


def multi_stream_sources(rng):
    joint = rng.standard_normal((300, 3, 25, 2)).astype(np.float32)
    label = rng.integers(0, 60, size=(300,), dtype=np.int64)
    seqs = [np.arange(int(n), dtype=np.int32) for n in rng.integers(0, 40, 300)]
    return joint, label, seqs


def test_multi_stream(tmp_path, monkeypatch):
    joint, label, seqs = multi_stream_sources(np.random.default_rng(1))
    ns = run_block("multi_stream.py", tmp_path, monkeypatch, joint=joint, label=label, seqs=seqs)
    batch = ns["batch"]
    from loaderx.sampler import Sampler

    idx = Sampler(300, 256, Sampler.Mode.CYCLIC, seed=42).batch(0)
    np.testing.assert_array_equal(batch["joint"], joint[idx])
    np.testing.assert_array_equal(batch["label"], label[idx])
    assert [len(t) for t in batch["token"]] == [len(seqs[i]) for i in idx]
    assert all(s.closed for s in ns["streams"].values())


def test_collate(tmp_path, monkeypatch):
    from loaderx.zrecord import Dense

    tokens = np.random.default_rng(2).integers(0, 50_000, size=(100, 16), dtype=np.int32)
    with Dense.create(tmp_path / "tok", np.int32, (16,), codec="zstd") as w:
        w.append(tokens)
    with Dense.create(tmp_path / "lab", np.int64, (), codec="raw") as w:
        w.append(np.arange(100, dtype=np.int64))
    from loaderx.dataloader import DataLoader
    from loaderx.sampler import Sampler

    # The block continues the multi-stream one, which imported Sampler and DataLoader.
    with Dense.open(tmp_path / "tok") as dense_tokens, Dense.open(tmp_path / "lab") as labelset:
        ns = run_block("collate.py", tmp_path, monkeypatch, dense_tokens=dense_tokens,
                       labelset=labelset, Sampler=Sampler, DataLoader=DataLoader)
    batch = ns["batch"]
    assert set(batch) == {"input_ids", "label"}
    np.testing.assert_array_equal(batch["input_ids"], tokens[batch["label"]])


def test_sampler_example(tmp_path, monkeypatch):
    ns = run_block("sampler.py", tmp_path, monkeypatch)
    np.testing.assert_array_equal(ns["saved"], ns["indices"])
    ns["sampler"].next()
    assert not np.array_equal(ns["saved"], ns["indices"])  # the borrowed view moved on


class StopTraining(Exception):
    pass


def cpu_device_shims(monkeypatch, calls):
    """This machine has no accelerator: the blocks say device = "cuda:0", so route CUDA copies
    to the CPU and record what the example asked for (the device and non_blocking flags)."""
    import torch

    real_to = torch.Tensor.to

    def to(self, *args, **kwargs):
        calls.append(("to", args, kwargs))
        args = tuple("cpu" if str(a).startswith("cuda") else a for a in args)
        return real_to(self, *args, **kwargs)

    def pin_memory(self, *args, **kwargs):
        calls.append(("pin_memory",))
        return self

    monkeypatch.setattr(torch.Tensor, "to", to)
    monkeypatch.setattr(torch.Tensor, "pin_memory", pin_memory)
    return torch


def run_training_blocks(tmp_path, monkeypatch, names, steps=3):
    joint, label, seqs = multi_stream_sources(np.random.default_rng(3))
    from loaderx.dataloader import DataLoader
    from loaderx.sampler import Sampler
    from loaderx.zrecord import Dense

    seen = []

    def model(batch):
        seen.append(batch)
        if len(seen) % steps == 0:
            raise StopTraining

    monkeypatch.chdir(tmp_path)
    root = "xsub/train"
    with Dense.create(root + "/joint", joint.dtype, joint.shape[1:], codec="zstd") as s:
        s.append(joint)
    with Dense.create(root + "/label", label.dtype, label.shape[1:], codec="zstd") as s:
        s.append(label)
    namespace = {"np": np, "Dense": Dense, "DataLoader": DataLoader, "Sampler": Sampler,
                 "root": root, "model": model}
    for name in names:
        text = (SEED / name).read_text()
        if name == "cpu_gpu_pinned.py":
            # The pinned block only redefines to_device: run it, then the training loop of
            # the previous block again with the new transform.
            exec(compile(text, str(SEED / name), "exec"), namespace)
            torch_block = (SEED / "cpu_gpu_torch.py").read_text()
            name, text = "cpu_gpu_torch.py", torch_block[torch_block.index("streams = {"):]
        with pytest.raises(StopTraining):
            exec(compile(text, str(SEED / name), "exec"), namespace)
        namespace["loader"].close()
        for stream in namespace["streams"].values():
            stream.close()
    return namespace, seen, joint, label


def test_cpu_to_gpu_transfer_with_torch(tmp_path, monkeypatch):
    calls = []
    torch = cpu_device_shims(monkeypatch, calls)
    ns, seen, joint, label = run_training_blocks(tmp_path, monkeypatch, ["cpu_gpu_torch.py"])
    assert all(isinstance(v, torch.Tensor) for b in seen for v in b.values())
    assert seen[0]["joint"].shape == (256, 3, 25, 2)
    assert ("to", ("cuda:0",), {"non_blocking": True}) in calls
    from loaderx.sampler import Sampler

    idx = Sampler(300, 256, Sampler.Mode.CYCLIC, seed=42).batch(2)
    np.testing.assert_array_equal(seen[2]["label"].numpy(), label[idx])


def test_cpu_to_gpu_transfer_with_pinned_memory(tmp_path, monkeypatch):
    calls = []
    cpu_device_shims(monkeypatch, calls)
    _, seen, _, _ = run_training_blocks(tmp_path, monkeypatch,
                                        ["cpu_gpu_torch.py", "cpu_gpu_pinned.py"])
    assert ("pin_memory",) in calls


def test_jax_device_put(tmp_path, monkeypatch):
    import jax

    joint, label, _ = multi_stream_sources(np.random.default_rng(4))
    ns = run_block("cpu_gpu_jax.py", tmp_path, monkeypatch)
    from loaderx.dataloader import DataLoader
    from loaderx.sampler import Sampler
    from loaderx.zrecord import Dense

    with Dense.create(tmp_path / "j", joint.dtype, joint.shape[1:], codec="zstd") as w:
        w.append(joint)
    with Dense.open(tmp_path / "j") as j, DataLoader(
            {"joint": j}, Sampler(300, 64, Sampler.Mode.CYCLIC, seed=1),
            transform=ns["to_device"]) as loader:
        batch = next(loader)
    assert isinstance(batch["joint"], jax.Array)
    np.testing.assert_array_equal(np.asarray(batch["joint"]),
                                  joint[Sampler(300, 64, Sampler.Mode.CYCLIC, seed=1).batch(0)])
