"""Backends that watch a run: a CPU backend that records, before every step, what memory=swap
keeps alive and where; the check that the experts were swapped at the switch."""

import weakref


def swap_probe():
    """A CPU backend that, before every step, records in `seen` (index, expert, how many of the
    high-noise expert's device tensors are alive, the low-noise expert when it is on the
    device), and keeps the low-noise expert's host copy (`host_low`) and the predictor's swap."""
    from parallel_wan.backends.torch.backend import TorchBackend, start_torch_backend
    from parallel_wan.backends.torch.swap import HostExpert
    from parallel_wan.models.experts import LOW
    from parallel_wan.weights.tree import iter_leaves

    class Probe(TorchBackend):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.high_refs, self.host_low, self.seen, self.swap = [], [], [], None

        def place(self, tree, dtype, keep_fp32=None, where="device", full_rows=None):
            out = super().place(tree, dtype, keep_fp32, where, full_rows)
            if where == "device" and isinstance(tree, dict) and "blocks" in tree and not self.high_refs:
                self.high_refs.extend(weakref.ref(t) for _, t in iter_leaves(out))
            if where == "host":
                self.host_low.append(out.tree)
            return out

        def noise_predictor(self, task):
            predict = super().noise_predictor(task)
            inner, seen, high_refs = predict.before_step, self.seen, self.high_refs

            def before_step(step):
                inner(step)
                # No gc.collect(): the swap must free the high-noise expert by reference count the
                # moment it lets go (on a GPU, memory held in a cycle stays allocated until the
                # collector happens to run) — and a full collection per step of a test worker's
                # heap cost the suite ~30 CPU-s.
                low = task.experts[LOW][1]
                seen.append(
                    (
                        step.index,
                        step.expert,
                        sum(r() is not None for r in high_refs),
                        None if isinstance(low, HostExpert) else low,
                    )
                )

            predict.before_step = before_step
            self.swap = predict.swap
            return predict

    return start_torch_backend("cpu", cls=Probe)


def assert_swapped_at(probe, switch: int) -> None:
    """Before step `switch` every high-noise tensor is alive; from it on none is, and the
    low-noise expert is whole on the device, every block equal to its host copy."""
    for i, _, alive, low in probe.seen:
        if i < switch:
            assert alive == len(probe.high_refs), (i, alive)
        else:
            assert alive == 0, (i, alive)  # every high-noise tensor freed
            assert low is not None and same_tree(low, probe.host_low[0]), i


def same_tree(a, b) -> bool:
    """Same leaf names, each leaf equal in shape, dtype and every value."""
    import torch

    from parallel_wan.weights.tree import iter_leaves

    a, b = dict(iter_leaves(a)), dict(iter_leaves(b))
    return a.keys() == b.keys() and all(a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]) for k in a)
