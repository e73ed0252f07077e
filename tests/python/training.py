"""The training run the PyTorch tests compare: SGD with momentum on a small
tanh MLP, each rank on its shard of every batch, against one process on the
whole batches from the same seed.

Tolerance on every weight after STEPS steps: 1e-12 in float64 and 1e-5 in
float32 (the only difference is the order of the additions; the model uses
tanh so that no ReLU sits on a rounding edge).
"""

import torch

TOLERANCE = {"float64": 1e-12, "float32": 1e-5}
STEPS = 20
BATCH = 64


# ---- training, the same code in the ranks and in the reference ----


def make_data(dtype):
    g = torch.Generator().manual_seed(5)
    x = torch.randn(512, 10, generator=g).to(dtype)
    y = torch.randint(0, 3, (512,), generator=g)
    return x, y


def make_model(dtype, seed=3):
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(10, 32), torch.nn.Tanh(), torch.nn.Linear(32, 16), torch.nn.Tanh(),
        torch.nn.Linear(16, 3),
    ).to(getattr(torch, dtype))


def flat_weights(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy().copy()


def train(dtype, steps=STEPS, rank=0, size=1, wrap=None, model_seed=3):
    """Trains with SGD + momentum; rank trains on shard rank of each batch.
    wrap(model, opt) -> (model, opt) distributes it. Returns flat weights."""
    torch.set_num_threads(1)
    x, y = make_data(getattr(torch, dtype))
    model = make_model(dtype, model_seed)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    if wrap:
        model, opt = wrap(model, opt)
    loss_fn = torch.nn.CrossEntropyLoss()
    shard = BATCH // size
    for s in range(steps):
        idx = torch.arange(s * BATCH, (s + 1) * BATCH) % x.shape[0]
        idx = idx[rank * shard : (rank + 1) * shard]
        opt.zero_grad()
        loss_fn(model(x[idx]), y[idx]).backward()
        opt.step()
    return flat_weights(model)
