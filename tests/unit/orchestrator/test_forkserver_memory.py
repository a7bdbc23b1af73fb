"""The fork server's memory preparation (``orchestrator._forkserver_memory``), at its seam."""

from __future__ import annotations

import sys

import pytest

from orchestrator._forkserver_memory import fill_free_blocks, free_blocks, free_list_objects

SIZE = 64
"""A pymalloc size class; ``bytes`` of ``SIZE - 33`` bytes fill one block of it exactly."""
POOL_BLOCKS = (16 * 1024 - 48) // SIZE
"""Blocks of ``SIZE`` one 16 KiB pool holds (CPython 3.11, 64-bit)."""

pytestmark = pytest.mark.skipif(
    not free_blocks(), reason="this interpreter reports no pymalloc statistics"
)


def test_free_blocks_reads_every_size_class() -> None:
    blocks = free_blocks()
    assert sorted(blocks) == list(range(16, 513, 16))
    assert all(count >= 0 for count in blocks.values())


def test_filling_takes_the_blocks_freed_inside_pools_still_in_use() -> None:
    objects = [bytes(SIZE - sys.getsizeof(b"")) for _ in range(6 * POOL_BLOCKS)]
    del objects[::2]  # every other block freed: holes through three pools' worth
    before = free_blocks()[SIZE]
    kept: list[object] = []
    taken = fill_free_blocks(kept)
    after = free_blocks()[SIZE]
    assert before >= 2 * POOL_BLOCKS
    assert taken == len(kept) >= before
    assert after <= POOL_BLOCKS  # what is left is one fresh pool, not holes among objects
    assert all(sys.getsizeof(obj) <= 512 for obj in kept)


def test_filling_takes_the_objects_the_free_lists_keep_for_reuse() -> None:
    made = [{} for _ in range(60)]
    del made  # freed dicts wait on the dict free list (it keeps up to 80)
    before = free_list_objects()
    kept: list[object] = []
    fill_free_blocks(kept)
    after = free_list_objects()
    assert before["dict"] >= 50
    assert after["dict"] <= 5
    assert {"list", "float", "tuple1", "tuple2"} <= set(after)
    assert sum(1 for obj in kept if type(obj) is dict) >= before["dict"]
