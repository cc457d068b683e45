"""Property-based tests of what every lane is fed: the idx parser and the mini-batch order.

Generated with hypothesis rather than hand-picked: idx files of random shapes and contents, each
corrupted in every way the header allows (truncated, extended, wrong magic, a zero dimension),
and batch orders over random sizes and seeds.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis_profiles import examples

from gradlanes.data.idx import IMAGES_MAGIC, LABELS_MAGIC, IdxFormatError, check_split, parse_idx
from gradlanes.experiment.batching import batch_order, eval_blocks, first_batch

DATA_SETTINGS = settings(
    max_examples=examples(60), deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)


def idx_bytes(array: np.ndarray, magic: int) -> bytes:
    return struct.pack(">I", magic) + struct.pack(f">{array.ndim}I", *array.shape) + array.tobytes()


@st.composite
def idx_arrays(draw):
    """An images (count, rows, columns) or labels (count) array of unsigned bytes, with its magic."""
    magic = draw(st.sampled_from([IMAGES_MAGIC, LABELS_MAGIC]))
    shape = tuple(draw(st.lists(st.integers(1, 9), min_size=magic & 0xFF, max_size=magic & 0xFF)))
    values = draw(st.binary(min_size=int(np.prod(shape)), max_size=int(np.prod(shape))))
    return np.frombuffer(values, np.uint8).reshape(shape), magic


@DATA_SETTINGS
@given(idx_arrays())
def test_a_valid_idx_file_parses_to_its_array(case):
    array, magic = case
    parsed = parse_idx(idx_bytes(array, magic), "f.idx", magic)
    assert parsed.dtype == np.uint8 and parsed.shape == array.shape
    np.testing.assert_array_equal(parsed, array)


@DATA_SETTINGS
@given(idx_arrays(), st.data())
def test_a_truncated_or_extended_idx_file_is_refused_by_name(case, data):
    array, magic = case
    blob = idx_bytes(array, magic)
    cut = data.draw(st.integers(0, len(blob) - 1), label="bytes kept")
    extra = data.draw(st.binary(min_size=1, max_size=8), label="bytes added")
    for broken in (blob[:cut], blob + extra):
        with pytest.raises(IdxFormatError, match=r"^f\.idx: ") as caught:
            parse_idx(broken, "f.idx", magic)
        assert any(word in str(caught.value) for word in ("too short", "ends after", "file length"))


@DATA_SETTINGS
@given(idx_arrays(), st.integers(0, 2**32 - 1))
def test_any_other_magic_is_refused_with_both_numbers(case, other):
    array, magic = case
    if other == magic:
        other ^= 1
    blob = struct.pack(">I", other) + idx_bytes(array, magic)[4:]
    with pytest.raises(IdxFormatError, match=rf"magic number is {other} .* expected {magic} "):
        parse_idx(blob, "f.idx", magic)


@DATA_SETTINGS
@given(idx_arrays(), st.data())
def test_a_zero_dimension_is_refused(case, data):
    array, magic = case
    shape = list(array.shape)
    shape[data.draw(st.integers(0, len(shape) - 1))] = 0
    blob = struct.pack(">I", magic) + struct.pack(f">{len(shape)}I", *shape)
    with pytest.raises(IdxFormatError, match="include a zero"):
        parse_idx(blob, "f.idx", magic)


@st.composite
def batch_settings(draw):
    batch_size = draw(st.integers(1, 40))
    train_images = draw(st.integers(batch_size, 300))
    return draw(st.integers(0, 2**32 - 1)), train_images, batch_size, draw(st.integers(1, 60))


@DATA_SETTINGS
@given(batch_settings())
def test_every_epoch_sees_each_image_at_most_once_and_all_but_the_partial_batch(case):
    seed, train_images, batch_size, steps = case
    batches = list(batch_order(seed, train_images, batch_size, steps))
    assert len(batches) == steps
    if batch_size == train_images:  # full batch: every image, every step
        assert all(b is None for b in batches)
        return
    per_epoch = train_images // batch_size
    for start in range(0, steps, per_epoch):
        epoch = np.concatenate(batches[start : start + per_epoch])
        assert len(np.unique(epoch)) == len(epoch)  # without replacement within an epoch
        assert epoch.min() >= 0 and epoch.max() < train_images
        if start + per_epoch <= steps:  # a whole epoch: all images but the dropped remainder
            assert len(epoch) == per_epoch * batch_size
    assert all(len(b) == batch_size for b in batches)  # one shape: one compiled program


@DATA_SETTINGS
@given(batch_settings())
def test_the_order_is_a_function_of_the_seed_alone(case):
    """Every lane of a seed (any engine, any process) draws the same batches; the first is shared."""
    seed, train_images, batch_size, steps = case
    one = list(batch_order(seed, train_images, batch_size, steps))
    two = list(batch_order(seed, train_images, batch_size, steps))
    assert all(np.array_equal(a, b) for a, b in zip(one, two, strict=True))
    first = first_batch(seed, train_images, batch_size)
    assert (first is None and one[0] is None) or np.array_equal(first, one[0])


@DATA_SETTINGS
@given(st.integers(1, 2500), st.integers(1, 4))
def test_evaluation_blocks_cover_the_test_set_once(count, width):
    images = np.arange(count * width, dtype=np.float32).reshape(count, width) + 1
    labels = (np.arange(count) % 10).astype(np.int32)
    blocks = eval_blocks(images, labels)
    assert len({b[0].shape for b in blocks}) == 1  # one shape: one compiled forward
    stacked = np.concatenate([b[0] for b in blocks])
    np.testing.assert_array_equal(stacked[:count], images)
    np.testing.assert_array_equal(np.concatenate([b[1] for b in blocks])[:count], labels)
    assert not stacked[count:].any() and len(stacked) - count < len(blocks[0][0])


# ---- what the mutation run (make mutation) found untested --------------------------------------


@pytest.mark.parametrize(("magic", "kind"), [(IMAGES_MAGIC, "images"), (LABELS_MAGIC, "labels")])
def test_a_wrong_magic_names_the_kind_of_file_expected(magic, kind):
    with pytest.raises(IdxFormatError, match=rf"for an idx {kind} file of unsigned bytes$"):
        parse_idx(struct.pack(">I", 0x0D03), "f.idx", magic)


def test_a_file_of_only_its_magic_is_cut_at_the_dimensions_not_too_short():
    with pytest.raises(IdxFormatError, match="header declares 1 dimensions but the file ends after 4 bytes"):
        parse_idx(struct.pack(">I", LABELS_MAGIC), "f.idx", LABELS_MAGIC)
    with pytest.raises(IdxFormatError, match="file is 3 bytes, too short for an idx header"):
        parse_idx(b"\0\0\x08", "f.idx", LABELS_MAGIC)


def test_the_largest_label_is_classes_minus_one():
    images = np.zeros((4, 2, 2), np.uint8)
    check_split(images, np.array([0, 9, 3, 9], np.uint8), "i", "l", 10)
    with pytest.raises(IdxFormatError, match=r"^l: label 10 at item 3 is outside 0..9"):
        check_split(images, np.array([0, 9, 3, 10], np.uint8), "i", "l", 10)  # the largest is classes
    with pytest.raises(IdxFormatError, match=r"^l: label 10 at item 1 is outside 0..9"):
        check_split(images, np.array([0, 10, 3, 11], np.uint8), "i", "l", 10)  # the first bad one
    check_split(images[:0], np.array([], np.uint8), "i", "l", 10)  # an empty split has no labels to check


@DATA_SETTINGS
@given(st.integers(1, 2500), st.sampled_from([np.float32, np.uint8]), st.sampled_from([np.int32, np.uint8]))
def test_evaluation_blocks_keep_the_dtypes_the_program_takes(count, image_dtype, label_dtype):
    blocks = eval_blocks(np.ones((count, 3), image_dtype), np.ones(count, label_dtype))
    assert {b[0].dtype for b in blocks} == {np.dtype(image_dtype)}
    assert {b[1].dtype for b in blocks} == {np.dtype(label_dtype)}
