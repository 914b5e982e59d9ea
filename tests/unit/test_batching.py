"""Global batches: by length, every sequence once per epoch, same split on any world size."""

import random

from draftline.drafter.batching import Padding, anchor_generator, epoch_batches, micro_batches
from draftline.drafter.lr_schedule import lr_at


def test_epoch_batches_cover_once_with_little_padding():
    rng = random.Random(0)
    lengths = [rng.randint(40, 1024) for _ in range(1000)]  # chat-like spread of lengths
    ids = [f"r{i}" for i in range(1000)]
    for epoch in range(2):
        batches = epoch_batches(lengths, ids, 8, seed=0, epoch=epoch)
        assert sorted(i for b in batches for i in b) == list(range(1000))
        pad = Padding()
        for b in batches:
            pad.add([lengths[i] for i in b])
        assert pad.fraction < 0.10
    assert epoch_batches(lengths, ids, 8, 0, 0) != epoch_batches(lengths, ids, 8, 0, 1)  # new order each epoch
    assert epoch_batches(lengths, ids, 8, 0, 1) == epoch_batches(lengths, ids, 8, 0, 1)  # and reproducible


def test_micro_batches_split_the_same_way_for_any_world_size():
    batch = list(range(8))
    one = micro_batches(batch, 0, 1, 4)
    four = [m for r in range(4) for m in micro_batches(batch, r, 4, 1)]
    two = [m for r in range(2) for m in micro_batches(batch, r, 2, 2)]
    assert one == four == two == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert [m for r in range(2) for m in micro_batches([0, 1, 2], r, 2, 1)] in ([[0], [1, 2]], [[0, 1], [2]])


def test_anchors_depend_on_seed_epoch_and_id_only():
    a = anchor_generator(0, 1, "x").initial_seed()
    assert a == anchor_generator(0, 1, "x").initial_seed()
    assert len({a, anchor_generator(0, 2, "x").initial_seed(), anchor_generator(1, 1, "x").initial_seed(),
                anchor_generator(0, 1, "y").initial_seed()}) == 4


def test_lr_warmup_then_cosine_to_floor():
    lrs = [lr_at(s, 100, 1.0, 0.1, 0.1) for s in range(100)]
    assert lrs[0] == 0.1 and lrs[9] == 1.0
    assert all(a >= b for a, b in zip(lrs[9:], lrs[10:]))
    assert abs(lr_at(100, 100, 1.0, 0.1, 0.1) - 0.1) < 1e-12
