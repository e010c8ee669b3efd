"""The task tree table in nursery_tree.py is a tree: one root, every parent named."""

from __future__ import annotations

from trionsq.nursery_tree import TREE


def test_every_task_has_a_named_parent_and_one_root() -> None:
    names = [name for name, _ in TREE]
    assert len(names) == len(set(names))
    roots = [name for name, parent in TREE if parent is None]
    assert roots == ["serve_nsqd"]
    for name, parent in TREE:
        assert parent is None or parent in names, f"{name} has unknown parent {parent}"


def test_the_lookupd_tree_has_one_root_and_named_parents() -> None:
    from trionsq.lookupd.server import TREE as LOOKUPD_TREE

    names = [name for name, _ in LOOKUPD_TREE]
    assert len(names) == len(set(names))
    assert [name for name, parent in LOOKUPD_TREE if parent is None] == ["serve_lookupd"]
    for name, parent in LOOKUPD_TREE:
        assert parent is None or parent in names, f"{name} has unknown parent {parent}"


def test_every_task_node_is_a_node_of_the_tree() -> None:
    from trionsq.nursery_tree import TASKS

    assert set(TASKS) <= {name for name, _ in TREE}


def test_the_client_tree_has_one_root_and_named_parents() -> None:
    from trionsq.nursery_tree import CLIENT_TASKS, CLIENT_TREE

    names = [name for name, _ in CLIENT_TREE]
    assert len(names) == len(set(names))
    assert [name for name, parent in CLIENT_TREE if parent is None] == ["caller task"]
    for name, parent in CLIENT_TREE:
        assert parent is None or parent in names, f"{name} has unknown parent {parent}"
    assert set(CLIENT_TASKS) <= set(names)
