"""Mini-batch order: seeded, identical for every lane, without replacement within an epoch."""

from __future__ import annotations

import numpy as np

from gradlanes.experiment.batching import EVAL_BATCH, batch_order, eval_batch, eval_blocks, first_batch


def test_same_seed_same_order_other_seed_other_order():
    a = list(batch_order(3, 1000, 100, 25))
    b = list(batch_order(3, 1000, 100, 25))
    c = list(batch_order(4, 1000, 100, 25))
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not np.array_equal(a[0], c[0])
    np.testing.assert_array_equal(first_batch(3, 1000, 100), a[0])


def test_each_epoch_is_a_permutation_and_drops_the_partial_batch():
    batches = list(batch_order(0, 1050, 100, 20))  # 10 full batches per epoch, 50 images dropped
    assert len(batches) == 20 and all(len(b) == 100 for b in batches)
    for epoch in (batches[:10], batches[10:]):
        seen = np.concatenate(epoch)
        assert len(np.unique(seen)) == 1000 and seen.max() < 1050
    assert not np.array_equal(np.concatenate(batches[:10]), np.concatenate(batches[10:]))


def test_full_batch_uses_every_image_each_step():
    assert list(batch_order(0, 4096, 4096, 3)) == [None, None, None]


def test_test_images_are_evaluated_in_blocks_of_one_shape_once_each():
    images = np.arange(2500 * 3, dtype=np.float32).reshape(2500, 3) + 1
    labels = np.arange(2500, dtype=np.int32) % 10 + 1
    blocks = eval_blocks(images, labels)
    assert [len(b[0]) for b in blocks] == [EVAL_BATCH] * 3 and EVAL_BATCH == eval_batch(2500) == 1000
    stacked = np.concatenate([b[0] for b in blocks])
    np.testing.assert_array_equal(stacked[:2500], images)
    assert not stacked[2500:].any() and not np.concatenate([b[1] for b in blocks])[2500:].any()
    assert eval_batch(200) == 200 and len(eval_blocks(images[:200], labels[:200])) == 1
