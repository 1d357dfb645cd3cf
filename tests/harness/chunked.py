"""A whole param tree cut as a sharded load would read it (tests build their trees in memory)."""

from parallel_wan.weights import tree as param_tree
from parallel_wan.weights.safetensors_io import chunk_rows


def chunk_tree(full_tree: dict, index: int, count: int) -> dict:
    """torch.chunk row `index` of `count` of every tensor (an empty slice where torch.chunk has
    fewer chunks): what `load_transformer(shard=(index, count))` reads from disk, for trees
    that are already in memory (the tests' trees)."""

    def cut(_, t):
        if t.ndim == 0:
            return t
        begin, end = chunk_rows(t.shape[0], index, count)
        return t[begin:end].clone()

    return param_tree.map_leaves(cut, full_tree)
