"""What the fake GPU harness raises when the program does something a real GPU would refuse."""


class FakeCudaError(RuntimeError):
    """A misuse of the CUDA API or a device/dtype rule a CUDA kernel enforces (not a limit of
    the fake): the same program would fail on a real GPU."""


class CollectiveError(RuntimeError):
    """A collective NCCL would refuse (a tensor off this rank's GPU, sizes that do not add up)."""
