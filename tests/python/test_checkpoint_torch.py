"""ringd.checkpoint with PyTorch: tensors in the part format, random states,
a data loader resumed in the middle of an epoch, and a 4-rank training run
killed at step k and resumed from its checkpoint, which must end with the
parameters of an uninterrupted run, bit for bit.

The training (rank_train) has everything that makes a resume go wrong when
some state is missing: a shuffling DataLoader with its own generator,
dropout (torch's global generator), input noise from NumPy's global
generator, a scale from Python's random, and Adam, whose moments and step
counts live in the optimizer. Every rank draws differently (seeds per rank);
DistributedOptimizer averages the gradients, so the replicas stay equal.
"""

import os
import random
import re
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import import_torch

torch = import_torch()


import ringd.checkpoint as ckpt  # noqa: E402
import ringd.torch as rt  # noqa: E402
from ringd import _ckpt_format as fmt  # noqa: E402

STEPS = 23
EVERY = 4  # a checkpoint every 4 steps; an epoch is 5 steps (40 samples, batches of 8)


def through_a_file(state):
    """state as load() would give it back: encoded, written, read, decoded."""
    head, blobs, _ = fmt.encode(state)
    data = b"".join(bytes(memoryview(c)) for c in fmt.chunks(head, blobs))
    return fmt.decode(np.frombuffer(bytearray(data), np.uint8))


# ---- the format and the random states, in this process ----


def test_tensors_come_back_with_their_dtype_shape_values_and_flags():
    base = torch.arange(12, dtype=torch.float64).reshape(3, 4) / 3
    state = {
        "f64": base, "f32": base.float(), "f16": base.half(), "bf16": base.bfloat16(),
        "i64": torch.arange(5), "i16": torch.arange(5, dtype=torch.int16),
        "u8": torch.arange(5, dtype=torch.uint8), "bool": torch.tensor([True, False]),
        "c64": torch.tensor([1 + 2j], dtype=torch.complex64), "scalar": torch.tensor(2.5),
        "transposed": base.t(), "param": torch.nn.Parameter(base.clone()),
        "frozen": torch.nn.Parameter(base.clone(), requires_grad=False),
        "empty": torch.zeros(0, 3),
    }
    out = through_a_file(state)
    for k, t in state.items():
        assert out[k].dtype == t.dtype and out[k].shape == t.shape, k
        assert torch.equal(out[k], t.detach()), k
        assert type(out[k]) is type(t) and out[k].requires_grad == t.requires_grad, k


def test_a_model_and_optimizer_state_dict_load_back_exactly():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    model(torch.randn(8, 4)).sum().backward()
    opt.step()
    state = through_a_file({"model": model.state_dict(), "optimizer": opt.state_dict()})
    assert state["model"]._metadata == model.state_dict()._metadata
    model2 = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
    opt2 = torch.optim.Adam(model2.parameters(), lr=0.5)
    model2.load_state_dict(state["model"])
    opt2.load_state_dict(state["optimizer"])
    for a, b in zip(model.state_dict().values(), model2.state_dict().values()):
        assert torch.equal(a, b)
    s1, s2 = opt.state_dict(), opt2.state_dict()
    assert s1["param_groups"] == s2["param_groups"]
    for i in s1["state"]:
        for k in s1["state"][i]:
            assert torch.equal(s1["state"][i][k], s2["state"][i][k]), (i, k)


def draw(generators):
    return (random.random(), float(np.random.rand()), torch.rand(1).item(),
            torch.rand(1, generator=generators["t"]).item(), generators["n"].random(),
            generators["rs"].rand(), generators["py"].random())


def test_capture_and_restore_give_back_every_random_state():
    gens = {"t": torch.Generator().manual_seed(1), "n": np.random.default_rng(2),
            "rs": np.random.RandomState(3), "py": random.Random(4)}
    draw(gens)
    saved = through_a_file(ckpt.capture(generators=gens, progress={"step": 7}))
    expected = [draw(gens) for _ in range(3)]
    draw(gens)
    assert ckpt.restore(saved, generators=gens) == {"step": 7}
    assert [draw(gens) for _ in range(3)] == expected


@pytest.mark.parametrize("own_generator", [True, False], ids=["loader-generator", "global-rng"])
def test_a_loader_resumed_mid_epoch_gives_the_rest_of_its_batches_and_draws(own_generator):
    def run(seed, saved=None, save_at=None):
        torch.manual_seed(seed)
        np.random.seed(seed)
        random.seed(seed)
        g = torch.Generator().manual_seed(7) if own_generator else None
        data = torch.utils.data.TensorDataset(torch.arange(20))
        loader = ckpt.ResumableLoader(
            torch.utils.data.DataLoader(data, batch_size=3, shuffle=True, generator=g))
        if saved:
            ckpt.restore(saved, loader=loader)
        seen = []
        for _ in range(loader.epoch, 3):
            for (b,) in loader:
                seen.append((b.tolist(), torch.rand(1).item(), np.random.rand(), random.random()))
                if len(seen) == save_at:
                    saved = through_a_file(ckpt.capture(loader=loader))
        return seen, saved

    full, saved = run(0, save_at=9)  # 7 batches an epoch: in the middle of the second
    assert saved["loader"]["epoch"] == 1 and saved["loader"]["batches"] == 2
    rest, _ = run(123, saved)
    assert rest == full[9:]


# ---- 4 ranks ----


def rank_background(c, base):
    model = torch.nn.Linear(4, 2)
    rt.broadcast_parameters(model, conn=c)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    p = ckpt.save(base / f"h{c.rank}", 1, {"model": model.state_dict()}, conn=c,
                  background=True)
    with torch.no_grad():
        model.weight.add_(1.0)  # while the part is written
    assert p.wait() == 1
    state = ckpt.load(base / f"h{c.rank}", conn=c)
    return all(torch.equal(state["model"][k], v) for k, v in before.items())


def test_a_background_save_holds_the_tensors_as_they_were_at_save(own_pools, tmp_path):
    assert own_pools.get().run(rank_background, tmp_path) == [True] * 4




def rank_train(c, base, steps=STEPS, every=EVERY, pause_at=None, go_on=False, resume=False):
    """Trains to steps, saving every `every` steps into base/h<rank>; with
    resume, from the newest checkpoint. pause_at: after that step, says so
    (a file) and waits to be killed (go_on: goes on training). Returns the
    flat parameters, bytes, and the step it resumed at."""
    torch.set_num_threads(1)
    torch.manual_seed(1000 + c.rank)
    np.random.seed(2000 + c.rank)
    random.seed(3000 + c.rank)
    data = torch.Generator().manual_seed(c.rank)
    x = torch.randn(40, 6, generator=data)
    y = torch.randint(0, 3, (40,), generator=data)
    loader = ckpt.ResumableLoader(torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(x, y), batch_size=8, shuffle=True,
        generator=torch.Generator().manual_seed(4000 + c.rank)))
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Dropout(0.3),
                                torch.nn.Linear(16, 3))
    rt.broadcast_parameters(model, conn=c)
    opt = rt.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=0.01),
                                  named_parameters=model.named_parameters(), conn=c)
    directory = os.path.join(base, f"h{c.rank}")
    step = 0
    if resume:
        step = ckpt.restore(ckpt.load(directory, conn=c), model=model, optimizer=opt,
                            loader=loader)["step"]
    resumed_at = step
    while step < steps:
        for xb, yb in loader:
            noise = torch.from_numpy(np.random.normal(0, 0.01, tuple(xb.shape))).float()
            opt.zero_grad()
            out = model(xb * random.uniform(0.9, 1.1) + noise)
            torch.nn.functional.cross_entropy(out, yb).backward()
            opt.step()
            step += 1
            if step % every == 0:
                ckpt.save(directory, step, ckpt.capture(
                    model=model, optimizer=opt, loader=loader, progress={"step": step}), conn=c)
            if step == pause_at:
                with open(os.path.join(base, f"paused-{c.rank}"), "w"):
                    pass
                deadline = time.monotonic() + 60
                while not go_on and time.monotonic() < deadline:  # the test kills it here
                    time.sleep(0.05)
            if step == steps:
                break
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    return flat.numpy().tobytes(), resumed_at


@pytest.fixture(scope="module")
def uninterrupted(own_pools, tmp_path_factory):
    got = own_pools.get().run(rank_train, tmp_path_factory.mktemp("uninterrupted"))
    assert len({w for w, _ in got}) == 1, "the replicas differ"
    return got[0][0]


@pytest.mark.parametrize("kill_at, go_on, resume_from", [
    (14, False, [12]),
    (22, False, [20]),
    # Killed wherever they are after step 13: in a collective, say, or
    # halfway through a save (needs the daemon to put a new job in step
    # after a crash, issue 11).
    (13, True, [12, 16, 20]),
], ids=["mid-epoch", "at-an-epoch-end", "while-running"])
def test_a_run_killed_at_step_k_and_resumed_ends_bit_identical_to_an_uninterrupted_one(
        own_ring, own_pools, tmp_path, uninterrupted, kill_at, go_on, resume_from):
    pool = own_pools.get()
    pool.start(rank_train, tmp_path, pause_at=kill_at, go_on=go_on)
    deadline = time.monotonic() + 60
    ranks = [0] if go_on else range(4)
    while not all((tmp_path / f"paused-{r}").exists() for r in ranks):
        assert time.monotonic() < deadline, "the ranks did not reach the step to kill them at"
        time.sleep(0.005)
    pool.kill()  # every rank, at once, as a crashed job

    assert all(p.poll() is None for p in own_ring.procs), "a daemon died"
    got = own_pools.get().run(rank_train, tmp_path, resume=True)
    assert len({at for _, at in got}) == 1 and got[0][1] in resume_from, got
    assert len({w for w, _ in got}) == 1, "the replicas differ"
    assert got[0][0] == uninterrupted, "the resumed run ends with other parameters"


# ---- the example ----


def test_the_example_crashed_and_started_again_resumes_and_ends_as_a_run_that_never_crashed(
        tmp_path):
    example = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "train_mlp.py")

    def train(*extra):
        r = subprocess.run([sys.executable, example, "--launch", "4", "--epochs", "3",
                            "--samples", "1024", "--checkpoint-every", "3", *extra],
                           capture_output=True, text=True, timeout=240)
        digest = re.search(r"replicas bit-identical .* sha256 ([0-9a-f]+)", r.stdout)
        return r, digest and digest.group(1)

    plain, digest = train("--checkpoint-dir", str(tmp_path / "plain"))
    assert plain.returncode == 0 and digest, plain.stdout + plain.stderr
    crashed, _ = train("--checkpoint-dir", str(tmp_path / "ckpt"), "--crash-at-step", "7")
    assert crashed.returncode == 3, crashed.stdout + crashed.stderr
    assert "rank 0: crashing at step 7" in crashed.stdout
    again, digest_again = train("--checkpoint-dir", str(tmp_path / "ckpt"))
    assert again.returncode == 0, again.stdout + again.stderr
    assert "resumed from the checkpoint of step 6 (epoch 2, batch 2)" in again.stdout
    assert "matches: OK" in again.stdout
    assert digest_again == digest
