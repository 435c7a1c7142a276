"""Data-parallel training with loaderx and torch.distributed (gloo, CPU), resumable.

    python docs/examples/ddp_gloo.py WORKDIR --steps 12 --stop-at 6   # trains steps 0..5
    python docs/examples/ddp_gloo.py WORKDIR --steps 12               # resumes: steps 6..11

Spawns --world-size processes (default 2) unless started by torchrun
(``torchrun --nproc-per-node 2 docs/examples/ddp_gloo.py WORKDIR``; over several hosts, each
with its own WORKDIR: docs/design/distributed.md). Every rank checks that all ranks read the
same stores (their digests) before training, and builds the same Sampler with its own
``rank``, so at each step the ranks read disjoint records, the same number each. A run ends
by writing one checkpoint, rank 0's WORKDIR/checkpoint.pt (model, optimizer and every rank's
loader state); the next run resumes from it exactly, with the same or another number of
processes: the global batch (GLOBAL_BATCH records per step) is fixed and split over the
ranks, so a resumed run continues the same sequence of records. Each rank appends the record
IDs of every step to its WORKDIR/rank<r>.jsonl.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.nn  # noqa: F401  before any process group: see the end of train()
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel

from loaderx.dataloader import DataLoader
from loaderx.sampler import Sampler
from loaderx.torch import check_same_stores
from loaderx.zrecord import Dense, StoreExistsError

RECORDS = 1000
GLOBAL_BATCH = 32  # records per step, split over the ranks: world_size must divide it


def make_data(root: Path) -> None:
    """A small regression problem as three index-aligned stores: x, y and the record ID.
    Deterministic, so every host that builds its own copy builds the same stores."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((RECORDS, 8)).astype(np.float32)
    y = (x @ np.linspace(-1, 1, 8, dtype=np.float32) + 0.5).astype(np.float32)
    for name, values in {"x": x, "y": y, "id": np.arange(RECORDS, dtype=np.int64)}.items():
        if (root / name).exists():
            continue
        try:
            with Dense.create(root / name, values.dtype, values.shape[1:], codec="zstd") as w:
                w.append(values)
        except StoreExistsError:
            pass  # another host published it first on a shared file system


def train(rank: int, world_size: int, root: Path, steps: int, stop_at: int) -> None:
    """One process: join the group, check the data, resume from the checkpoint, train,
    checkpoint."""
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    if int(os.environ.get("LOCAL_RANK", rank)) == 0:  # one process per host
        make_data(root)
    dist.barrier()
    streams = {name: Dense.open(root / name) for name in ("x", "y", "id")}
    check_same_stores(streams)  # a host with other data stops every rank here, loudly
    sampler = Sampler(RECORDS, GLOBAL_BATCH // world_size, Sampler.Mode.CYCLIC, seed=42,
                      rank=rank, world_size=world_size)
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.3)
    checkpoint = root / "checkpoint.pt"
    # Rank 0 reads the checkpoint and sends it to every rank, so other hosts need no copy.
    saved = [torch.load(checkpoint) if rank == 0 and checkpoint.exists() else None]
    dist.broadcast_object_list(saved, src=0)
    state = None
    if saved[0] is not None:
        model.module.load_state_dict(saved[0]["model"])
        optimizer.load_state_dict(saved[0]["optimizer"])
        # Any rank's state, rewritten for this rank of this run's world size (which may
        # differ from the saved run's: elastic resume keeps the global batch). The state
        # names the stores' digests: other data is refused.
        state = DataLoader.reshard(saved[0]["loaders"][0], world_size=world_size, rank=rank)
    loader = DataLoader(streams, sampler, workers=2, prefetch=2, state=state)
    loss = torch.tensor(float("nan"))
    with open(root / f"rank{rank}.jsonl", "a") as log:
        step = 0 if state is None else state["step"]
        while step < min(steps, stop_at):
            batch = next(loader)
            x, y = torch.from_numpy(batch["x"]), torch.from_numpy(batch["y"])
            loss = torch.nn.functional.mse_loss(model(x).squeeze(1), y)
            optimizer.zero_grad()
            loss.backward()  # DDP averages the gradients of all ranks here
            optimizer.step()
            log.write(json.dumps({"step": loader.last_step, "ids": batch["id"].tolist(),
                                  "loss": loss.item()}) + "\n")
            step += 1
    # One shared checkpoint: rank 0 writes the model and every rank's loader state.
    loaders: list[dict | None] = [None] * world_size
    dist.all_gather_object(loaders, loader.state_dict())
    if rank == 0:
        torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(),
                    "loaders": loaders}, root / "checkpoint.tmp")
        os.replace(root / "checkpoint.tmp", checkpoint)
        print(f"rank 0: stopped before step {loaders[0]['step']}, loss {loss.item():.4f}")
    loader.close()
    for store in streams.values():
        store.close()
    # Destroying the group stops gloo's threads, but only once nothing holds the group. The
    # model does, so release it first. torch.distributed.nn does too if it is first imported
    # while a group exists (DDP imports it through torch._dynamo in torch 2.13): its functions
    # take group.WORLD as a default argument, which then keeps the group and its threads
    # until the interpreter's exit, where gloo's teardown can abort the process ("terminate
    # called without an active exception"). Hence its import at the top, before any group.
    del model, optimizer
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    """Parse the command line; train in this process under torchrun, else spawn the ranks."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--steps", type=int, default=12, help="train until this step")
    parser.add_argument("--stop-at", type=int, default=None, help="checkpoint and stop here")
    parser.add_argument("--world-size", type=int, default=2)
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    stop_at = args.steps if args.stop_at is None else args.stop_at
    if "RANK" in os.environ:  # started by torchrun, which set the rendezvous variables
        train(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args.workdir,
              args.steps, stop_at)
        return
    with socket.socket() as s:  # a free local port for the rendezvous
        s.bind(("127.0.0.1", 0))
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(s.getsockname()[1]))
    mp.spawn(_spawned, args=(args.world_size, args.workdir, args.steps, stop_at),
             nprocs=args.world_size)


def _spawned(rank: int, world_size: int, root: Path, steps: int, stop_at: int) -> None:
    """mp.spawn's entry point: it passes the process index first."""
    train(rank, world_size, root, steps, stop_at)


if __name__ == "__main__":
    main()
