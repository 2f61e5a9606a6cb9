"""Layout, the one index map: scale shapes, scale indices and group views against the spec's
index map written independently in tests/oracle.py (``oracle.expand``)."""

from __future__ import annotations

import numpy as np
import oracle
import pytest

import qcore
from qcore.layout import BLOCKED, PER_AXIS, PER_TENSOR, Layout, resolve_layout
from qcore.versions import LATEST_OPSET, QUANTIZE, resolve

SHAPES = [(7,), (4, 6), (3, 5, 4), (2, 3, 9, 2), (1, 8), (5, 1, 3)]


def configurations():
    for shape in SHAPES:
        yield shape, PER_TENSOR, 0, 0
        for axis in range(-len(shape), len(shape)):
            yield shape, PER_AXIS, axis, 0
            dim = shape[axis]
            for bs in sorted({1, 2, 3, max(1, dim - 1), dim, dim + 2}):
                yield shape, BLOCKED, axis, bs


CONFIGS = list(configurations())


def spec_kwargs(gran, axis, bs):
    """axis and block_size as the operators (and the oracle) take them."""
    if gran == PER_TENSOR:
        return 1, 0
    return axis, (bs if gran == BLOCKED else 0)


@pytest.mark.parametrize("shape, gran, axis, bs", CONFIGS)
def test_from_granularity_is_what_the_operator_resolves(shape, gran, axis, bs):
    lay = Layout.from_granularity(shape, gran, axis, bs)
    ax, b = spec_kwargs(gran, axis, bs)
    resolved = resolve_layout(resolve(QUANTIZE, LATEST_OPSET), shape, lay.scale_shape(), ax, b,
                              "y_scale")
    if resolved.granularity == PER_TENSOR:  # the spec: a 1-element scale is per-tensor
        assert lay.n_scales == 1 and len(lay.scale_shape()) <= 1
    else:
        assert resolved == lay
    assert lay.n_scales == int(np.prod(lay.scale_shape(), dtype=np.int64))
    assert lay.size == int(np.prod(shape))


@pytest.mark.parametrize("shape, gran, axis, bs", CONFIGS)
def test_expand_and_scale_index_follow_the_spec(shape, gran, axis, bs):
    lay = Layout.from_granularity(shape, gran, axis, bs)
    values = np.arange(lay.n_scales, dtype=np.float64) + 0.5
    ax, b = spec_kwargs(gran, axis, bs)
    expected = oracle.expand(values.reshape(lay.scale_shape()), shape, ax, b).reshape(-1)
    assert np.array_equal(lay.expand(values), expected)
    flat = np.arange(lay.size)
    assert np.array_equal(lay.scale_index(flat), expected.astype(np.int64))
    picked = np.array([lay.size - 1, 0, lay.size // 2])
    assert np.array_equal(lay.scale_index(picked), expected[picked].astype(np.int64))


@pytest.mark.parametrize("shape, gran, axis, bs", CONFIGS)
def test_group_views_hold_each_groups_elements(shape, gran, axis, bs):
    lay = Layout.from_granularity(shape, gran, axis, bs)
    x = np.random.default_rng(len(shape) + bs).permutation(lay.size).astype(np.float64)
    x = x.reshape(shape)
    group = lay.scale_index(np.arange(lay.size))
    flat = x.reshape(-1)
    want_max = np.full(lay.n_scales, -np.inf)
    np.maximum.at(want_max, group, flat)
    assert np.array_equal(lay.reduce_groups(x, np.maximum), want_max)
    want_sum = np.zeros(lay.n_scales)
    np.add.at(want_sum, group, flat)
    assert np.array_equal(lay.reduce_groups(x, np.add), want_sum)
    m = lay.group_matrix(x)
    assert m.shape[0] == lay.n_scales
    for g in range(lay.n_scales):
        row = m[g]
        assert np.array_equal(np.sort(row[~np.isnan(row)]), np.sort(flat[group == g]))


def test_scale_shapes():
    assert Layout.from_granularity((4, 6), PER_TENSOR).scale_shape() == ()
    assert Layout.from_granularity((4, 6), PER_AXIS, 0).scale_shape() == (4,)
    assert Layout.from_granularity((4, 6), PER_AXIS, -1).scale_shape() == (6,)
    assert Layout.from_granularity((4, 7), BLOCKED, 1, 3).scale_shape() == (4, 3)
    assert Layout.from_granularity((2, 7, 5), BLOCKED, 1, 2).scale_shape() == (2, 4, 5)
    assert Layout.from_granularity((), PER_TENSOR).scale_shape() == ()


@pytest.mark.parametrize("gran,block,expected", [(PER_TENSOR, 0, ()), (PER_AXIS, 0, (6,)),
                                                 (BLOCKED, 4, (2, 2, 5))])
def test_the_plans_accept_the_scale_shape(gran, block, expected):
    shape = (2, 6, 5)
    sshape = Layout.from_granularity(shape, gran, 1, block).scale_shape()
    assert sshape == expected
    plan = qcore.plan_quantize("float", shape, "float", sshape, "int8", sshape, axis=1,
                               block_size=block)
    assert plan.layout.granularity == gran


def test_the_kernels_accept_the_scale_shape():
    x = np.random.default_rng(0).standard_normal((3, 10, 4)).astype(np.float32)
    for gran, axis, bs in ((PER_AXIS, 1, 0), (BLOCKED, 1, 4), (BLOCKED, 2, 3), (BLOCKED, 0, 2)):
        lay = Layout.from_granularity(x.shape, gran, axis, bs)
        s = np.random.default_rng(1).uniform(0.01, 0.1, lay.scale_shape()).astype(np.float32)
        y = qcore.quantize_linear(x, s, np.zeros(s.shape, np.int8), axis=axis, block_size=bs)
        want = oracle.quantize(x, s, np.zeros(s.shape, np.int8), axis=axis, block_size=bs)
        assert np.array_equal(y, want)
        assert np.array_equal(lay.expand(s), oracle.expand(s, x.shape, axis, bs).reshape(-1))


@pytest.mark.parametrize("args, match", [
    (((4, 6), "per-row", 0, 0), "granularity"),
    (((4, 6), PER_AXIS, 2, 0), "axis=2"),
    (((4, 6), PER_AXIS, True, 0), "axis"),
    (((4, 6), BLOCKED, 1, 0), "block_size"),
    (((4, 6), BLOCKED, 1, -3), "block_size"),
    (((), PER_AXIS, 0, 0), "rank"),
])
def test_from_granularity_refuses_bad_arguments(args, match):
    with pytest.raises(qcore.QuantizationError, match=match):
        Layout.from_granularity(*args)


def test_negative_and_positive_axis_are_one_layout():
    shape = (4, 9)
    assert Layout.from_granularity(shape, PER_AXIS, 1) == Layout.from_granularity(shape, PER_AXIS,
                                                                                  -1)
    assert len({Layout.from_granularity(shape, BLOCKED, 1, b) for b in range(1, 10)}) == 9


def _walked_scale_indices(lp, n: int, step: int) -> np.ndarray:
    """Each element's scale index as the CPU kernels find it: chunks of `step` elements cut into
    runs by the walk (qcore.kernels.walk), each run's blocks by the one block walk."""
    from qcore.kernels.walk import block_count, block_span, locate, next_segment

    out = np.full(n, -1, np.int64)
    for i0 in range(0, n, step):
        m = min(step, n - i0)
        p, d, q = locate(i0, lp)
        j = 0
        while j < m:
            run, start, count, block, first, p, d, q = next_segment(p, d, q, m - j, lp)
            if block == 0:
                out[i0 + j:i0 + j + run] = start + np.arange(run)
                assert count == run
            else:
                assert count == block_count(run, block, first)
                for b in range(count):
                    j0, j1 = block_span(b, run, block, first)
                    assert j0 < j1
                    out[i0 + j + j0:i0 + j + j1] = start + b
            j += run
    return out


@pytest.mark.parametrize("shape, gran, axis, bs", CONFIGS)
def test_the_kernels_walk_is_the_index_map(shape, gran, axis, bs):
    """The CPU kernels' walk, run from any element (chunks of several lengths), gives every
    element the scale Layout.scale_index gives it."""
    from qcore.kernels.params import LayoutParams

    lay = Layout.from_granularity(shape, gran, axis, bs)
    n = int(np.prod(shape))
    want = lay.scale_index(np.arange(n))
    for step in (1, 2, 5, n):
        got = _walked_scale_indices(LayoutParams.from_layout(lay), n, step)
        np.testing.assert_array_equal(got, want, err_msg=f"chunks of {step}")


@pytest.mark.parametrize("shape, gran, axis, bs", CONFIGS)
def test_one_run_of_blocks_is_the_index_map_where_claimed(shape, gran, axis, bs):
    """Where single_run_block says x is one run of blocks of B elements (the kernels then
    convert it in one call of a segment), element j's scale is j // B by Layout.scale_index;
    and it says so for every per-tensor layout and every blocked layout on the last axis whose
    length is a multiple of the block."""
    from qcore.kernels.params import LayoutParams
    from qcore.kernels.walk import single_run_block

    lay = Layout.from_granularity(shape, gran, axis, bs)
    n = int(np.prod(shape))
    block = single_run_block(LayoutParams.from_layout(lay), n)
    want = lay.scale_index(np.arange(n))
    if block:
        np.testing.assert_array_equal(np.arange(n) // block, want)
    last = lay.post == 1
    if gran == PER_TENSOR or (gran == BLOCKED and last and shape[axis] % bs == 0
                              and lay.n_scales > 1):
        assert block, "a layout that is one run of blocks is not taken as one"
