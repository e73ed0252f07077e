"""ringd.elastic with PyTorch objects: a model's and an optimizer's state
go back to the commit and travel to a returning rank, on the fake ring of
fakegroup.py. Skipped without torch (and in sanitized builds)."""

import numpy as np

from conftest import import_torch
from fakegroup import FakeGroup
from ringd import elastic
from test_elastic import in_threads

torch = import_torch()


def make(seed):
    torch.manual_seed(seed)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return model, opt


def step(model, opt):
    opt.zero_grad()
    model(torch.ones(3, 4)).sum().backward()
    opt.step()


def params(model):
    return [p.detach().clone() for p in model.parameters()]


def same(a, b):
    return all(torch.equal(x, y) for x, y in zip(a, b))


def test_restore_brings_back_the_model_and_the_optimizer():
    model, opt = make(1)
    step(model, opt)
    s = elastic.State(model=model, optimizer=opt, step=1)
    want = params(model)
    momentum = [opt.state[p]["momentum_buffer"].clone() for p in model.parameters()]
    for _ in range(2):  # and the commit survives a restore and more training
        step(model, opt)
        s.step = 2
        s.restore()
        assert same(params(model), want)
        assert s.step == 1
        for p, m in zip(model.parameters(), momentum):
            assert torch.equal(opt.state[p]["momentum_buffer"], m)


def test_commit_copies_tensors_that_training_changes_in_place():
    model, opt = make(2)
    s = elastic.State(model=model, optimizer=opt, t=torch.zeros(3))
    s.t += 1
    with torch.no_grad():
        model.weight.add_(1)
    s.restore()
    assert s.t.tolist() == [0.0, 0.0, 0.0]
    assert same(params(model), params(make(2)[0]))


def test_sync_gives_a_returning_rank_the_trained_model():
    g = FakeGroup(2)
    states = []
    for r in range(2):
        model, opt = make(10 + r)  # different initial weights
        states.append(elastic.State(model=model, optimizer=opt, step=0))
    in_threads([lambda r=r: states[r].sync(g.conn(r)) for r in range(2)])
    for s in states:
        step(s.model, s.optimizer)
        s.step = 1
        s.commit()
    conn = g.join()
    model, opt = make(99)
    fresh = elastic.State(model=model, optimizer=opt, step=0)
    conns = [g.conn(0), g.conn(1)]
    for c in conns:
        c.epoch = g.epoch
    pairs = list(zip(states, conns)) + [(fresh, conn)]
    in_threads([lambda s=s, c=c: s.sync(c) for s, c in pairs])
    assert fresh.step == 1
    assert same(params(fresh.model), params(states[0].model))
    # The optimizer goes on where the others are: one more step agrees.
    for s in (states[0], fresh):
        step(s.model, s.optimizer)
    assert same(params(fresh.model), params(states[0].model))
    assert np.isfinite(params(fresh.model)[0].numpy()).all()
